// What a --model path holds, read from its content (a GGUF file's magic, a directory's files),
// never from its name: the one test the commands use to pick a model's loader.
#pragma once

#include <string>

namespace headcount {

enum class ModelFormat {
  encoder_directory,  // config.json + model.safetensors (+ vocab.txt): BertEncoder::load
  gguf,               // a GGUF file: LlamaDecoder::load
  checkpoint,         // a headcount checkpoint directory (checkpoint.safetensors): train::Trainer
};
const char* model_format_name(ModelFormat format);

// Error "<option>: expected an encoder directory (config.json + model.safetensors), a GGUF file
// or a headcount checkpoint directory, got <path> (<what is there>)" for anything else.
ModelFormat model_format(const std::string& path, const std::string& option = "--model");

}  // namespace headcount
