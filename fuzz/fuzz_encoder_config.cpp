// Fuzz target: read_encoder_config on a model directory whose JSON files are the input. The
// input is split at "\n##\n" into config.json, tokenizer_config.json, sentence_bert_config.json,
// 1_Pooling/config.json and modules.json (a missing part: that optional file is absent). Either
// an Error, or a config whose every field lies in the range the encoder relies on.
#include <cstdint>
#include <string_view>

#include "fuzz_input.h"
#include "headcount/encoder.h"
#include "headcount/error.h"

using headcount::fuzz::ScratchDir;

namespace {
const char* const kFiles[] = {"config.json", "tokenizer_config.json", "sentence_bert_config.json",
                              "1_Pooling/config.json", "modules.json"};

// Removed at exit (a static's destructor).
const ScratchDir& model_dir() {
  static const ScratchDir dir;
  static const bool filled = [] {
    dir.put("model.safetensors", "");  // only their presence is checked here
    dir.put("vocab.txt", "");
    return true;
  }();
  (void)filled;
  return dir;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const ScratchDir& dir = model_dir();
  const auto parts =
      headcount::fuzz::split(std::string_view(reinterpret_cast<const char*>(data), size), "\n##\n");
  for (std::size_t i = 0; i < std::size(kFiles); ++i) {
    if (i < parts.size())
      dir.put(kFiles[i], parts[i]);
    else
      dir.remove(kFiles[i]);
  }
  try {
    const headcount::EncoderConfig c = headcount::read_encoder_config(dir.path());
    FUZZ_ASSERT(c.hidden_size >= 1 && c.heads >= 1 && c.hidden_size % c.heads == 0);
    FUZZ_ASSERT(c.layers >= 1 && c.vocab_size >= 1 && c.intermediate_size >= 1);
    FUZZ_ASSERT(c.layer_norm_eps > 0 && c.layer_norm_eps < 1);
    FUZZ_ASSERT(c.tokenizer.max_length >= 2 && c.tokenizer.max_length <= c.max_position_embeddings);
    const auto table = headcount::model::weight_table(headcount::bert_definition(c));
    FUZZ_ASSERT(table.size() == 5 + 16 * static_cast<std::size_t>(c.layers));
  } catch (const headcount::Error&) {
  }
  return 0;
}
