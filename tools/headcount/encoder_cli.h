// What the encoder commands (embed, similarity, sts) share: the --model option and where the
// model comes from, the --threads option, reading sentences, and progress on stderr.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "headcount/encoder.h"

namespace headcount::cli {

// Where a command's model comes from: `flag` if given, else $<env> if set and not empty, else
// `fallback`; `source` names which, for the error line ("--model", "$<env>", or the default with
// what to do about it). The encoder's directory and the decoder's GGUF file are both found so.
struct ModelChoice {
  std::string path, source;
};
ModelChoice choose_model(const std::string& flag, const char* env, const std::string& fallback);

// Help text for --model: the search order, with the compiled-in default spelled out.
std::string model_option_help();

// The model directory: --model if given, else $HEADCOUNT_MODEL, else default_model_dir().
// Throws Error("model: expected a directory with model.safetensors, config.json, vocab.txt,
// got ... (from --model | $HEADCOUNT_MODEL | the default)").
// Whether --model names a GGUF decoder (by the file's content, model_files.h), for the commands
// that take an encoder directory or a decoder file. Empty: the default encoder. A headcount
// checkpoint directory: one line saying `command` does not take one yet.
bool names_a_decoder(const std::string& model, const std::string& command);

std::string resolve_model_dir(const std::string& flag);

// Loads the encoder from resolve_model_dir(flag), its projections in `dtype`.
BertEncoder load_encoder(const std::string& flag, DType dtype = DType::f32);

// --dtype (or the decoder's --weights, named by `option`): "fp32", "bf16" or "int8"; anything
// else: Error("<option>: expected fp32, bf16 or int8, got ...").
DType parse_dtype_option(const std::string& value, const std::string& option = "--dtype");

// Help text of --dtype, the same for every encoder command.
inline constexpr const char* kDtypeHelp =
    "Projections: fp32; bf16 (weights and GEMM inputs rounded to bf16, fp32 accumulation); or int8 "
    "(weights quantised per column, GEMM inputs per row, exact int32 sums)";

// Worker threads: 0 means every core the machine reports.
int resolve_threads(int threads);

// A path as results record it: relative to the repository when inside it, so that no directory
// of the machine that ran it lands in a committed result.
inline std::string path_as_recorded(const std::string& path) {
  const std::string source_dir = HEADCOUNT_SOURCE_DIR "/";
  return path.starts_with(source_dir) ? path.substr(source_dir.size()) : path;
}

// One sentence per line from FILE or "-" (stdin). A trailing '\r' is dropped; a final newline
// does not add an empty sentence, but empty lines inside the file are sentences. Throws Error
// for an unreadable or empty input.
std::vector<std::string> read_sentences(const std::string& path);

// A progress callback for EmbedOptions: nothing for short inputs; for long ones a line on
// stderr, rewritten in place on a terminal, every 10% otherwise.
std::function<void(std::int64_t, std::int64_t)> progress_reporter(const std::string& what);

}  // namespace headcount::cli
