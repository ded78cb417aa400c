#include "decoder_cli.h"

#include <filesystem>

#include "encoder_cli.h"
#include "headcount/error.h"
#include "headcount/model_files.h"

namespace headcount::cli {

CacheDType parse_kv_dtype(const std::string& name) {
  if (name == "fp32") return CacheDType::f32;
  if (name == "bf16") return CacheDType::bf16;
  if (name == "int8") return CacheDType::int8;
  fail("--kv-dtype", detail::concat("expected fp32, bf16 or int8, got '", name, "'"));
}

bool is_checkpoint_dir(const std::string& path) {
  // model_files.h's content test; anything it does not know is not a checkpoint here (the caller
  // then says what it expected).
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec)) return false;
  try {
    return model_format(path) == ModelFormat::checkpoint;
  } catch (const Error&) {
    return false;
  }
}

std::string resolve_decoder_model(const std::string& flag, bool checkpoint_allowed) {
  const ModelChoice model = choose_model(flag, "HEADCOUNT_DECODER_MODEL", default_decoder_model());
  std::error_code ec;
  const auto status = std::filesystem::status(model.path, ec);
  if (checkpoint_allowed && is_checkpoint_dir(model.path)) return model.path;
  if (!std::filesystem::is_regular_file(status))
    fail("model",
         detail::concat("expected a GGUF file",
                        checkpoint_allowed ? " or a headcount checkpoint directory" : "", ", got ",
                        model.path,
                        std::filesystem::exists(status) ? " (not a file)" : " (no such file)",
                        " (from ", model.source, ")"));
  return model.path;
}

std::string decoder_model_help() {
  return detail::concat("GGUF file. Default: $HEADCOUNT_DECODER_MODEL if set, else ",
                        default_decoder_model(), " (put there by scripts/setup.sh)");
}

DecoderOptions parse_weights_option(const std::string& model, const std::string& name) {
  if (name != "auto") return parse_decoder_weights(name, "--weights");
  return parse_decoder_weights(auto_decoder_weights(model), "--weights");
}

}  // namespace headcount::cli
