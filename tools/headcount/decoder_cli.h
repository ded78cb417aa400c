// What the commands that run a decoder (generate, perplexity, serve) share: finding the model
// file as `embed` finds its directory, and reading --weights and --kv-dtype.
#pragma once

#include <string>

#include "headcount/decoder.h"
#include "headcount/tensor.h"

namespace headcount::cli {

// --kv-dtype: fp32, bf16 or int8; anything else is one line naming the option and the value.
CacheDType parse_kv_dtype(const std::string& name);

// Whether `path` is a headcount checkpoint directory (`headcount train --out DIR`) by
// model_format's content test: generate runs it on the same inference executor as a GGUF file.
bool is_checkpoint_dir(const std::string& path);

// The decoder's file, found as the encoder's directory is (encoder_cli.h): --model if given,
// else $HEADCOUNT_DECODER_MODEL, else default_decoder_model(). Anything but an existing file (or,
// when `checkpoint_allowed`, a checkpoint directory) is one line naming the path and where it
// came from, before any option needs the model.
std::string resolve_decoder_model(const std::string& flag, bool checkpoint_allowed = false);

// --model's help line for a decoder.
std::string decoder_model_help();

// --weights: "auto" (the default) is the file's own blocks when it is quantized, else fp32;
// resolved as the model loads, after every other option is checked.
DecoderOptions parse_weights_option(const std::string& model, const std::string& name);

}  // namespace headcount::cli
