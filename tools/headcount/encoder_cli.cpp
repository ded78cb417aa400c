#include "encoder_cli.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>

#include "headcount/error.h"
#include "headcount/isa.h"
#include "headcount/model_files.h"

namespace headcount::cli {

using detail::concat;

std::string model_option_help() {
  return concat(
      "Model directory (model.safetensors, config.json, vocab.txt). Default: $HEADCOUNT_MODEL if "
      "set, else ",
      default_model_dir(), " (filled by scripts/setup.sh)");
}

ModelChoice choose_model(const std::string& flag, const char* env, const std::string& fallback) {
  if (!flag.empty()) return {flag, "--model"};
  const char* value = std::getenv(env);
  if (value != nullptr && *value != '\0') return {value, concat("$", env)};
  return {fallback, concat("the default; run scripts/setup.sh, or pass --model or set $", env)};
}

bool names_a_decoder(const std::string& model, const std::string& command) {
  if (model.empty()) return false;
  const ModelFormat format = model_format(model, "--model");
  check(format != ModelFormat::checkpoint, "--model",
        concat("an encoder directory or a GGUF file (`", command,
               "` does not take a headcount checkpoint yet; `generate` does)"),
        concat(model, " (a headcount checkpoint directory)"));
  return format == ModelFormat::gguf;
}

std::string resolve_model_dir(const std::string& flag) {
  const ModelChoice model = choose_model(flag, "HEADCOUNT_MODEL", default_model_dir());
  try {
    check_model_dir(model.path);
  } catch (const Error& e) {
    throw Error(concat(e.what(), " (from ", model.source, ")"));
  }
  return model.path;
}

BertEncoder load_encoder(const std::string& flag, DType dtype) {
  // Without vdpbf16ps the bf16 projections run on fp32 multiply-adds over widened values (at
  // batch 32 the weights are widened once per call, at batch 1 pair by pair), so they are no
  // faster than fp32 (0.95-1.02x at batch 32 on an Intel host without AVX512_BF16,
  // docs/performance.md). The user asked for speed; say where it is not.
  if (dtype == DType::bf16 && !isa_supported(Isa::avx512_bf16))
    std::cerr
        << "headcount: note: this CPU (or HEADCOUNT_ISA) has no AVX512_BF16, so --dtype bf16 "
           "widens its "
           "weights to fp32 and runs no faster than fp32 here; its results are still bf16's\n";
  return BertEncoder::load(resolve_model_dir(flag), {.dtype = dtype});
}

DType parse_dtype_option(const std::string& value, const std::string& option) {
  check(value == "fp32" || value == "bf16" || value == "int8", option, "fp32, bf16 or int8", value);
  return parse_encoder_dtype(value);
}

int resolve_threads(int threads) {
  check(threads >= 0 && threads <= 1024, "--threads", "0 (all cores) to 1024", threads);
  if (threads > 0) return threads;
  return std::max(1u, std::thread::hardware_concurrency());
}

std::vector<std::string> read_sentences(const std::string& path) {
  std::ifstream file;
  std::istream* in = &std::cin;
  if (path != "-") {
    file.open(path, std::ios::binary);
    if (!file) fail(path, "cannot open the input file");
    in = &file;
  }
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(*in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    lines.push_back(line);
  }
  check(!lines.empty(), path == "-" ? std::string("stdin") : path, "at least one line of text",
        "an empty input");
  return lines;
}

std::function<void(std::int64_t, std::int64_t)> progress_reporter(const std::string& what) {
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  auto last_decile = std::make_shared<std::int64_t>(0);
  return [what, tty, last_decile](std::int64_t done, std::int64_t total) {
    if (total < 512) return;  // short inputs finish before a report would help
    if (tty) {
      std::fprintf(stderr, "\r%s: %lld/%lld sentences", what.c_str(), static_cast<long long>(done),
                   static_cast<long long>(total));
      if (done == total) std::fputc('\n', stderr);
    } else if (const std::int64_t decile = done * 10 / total; decile > *last_decile) {
      *last_decile = decile;
      std::fprintf(stderr, "%s: %lld/%lld sentences\n", what.c_str(), static_cast<long long>(done),
                   static_cast<long long>(total));
    }
    std::fflush(stderr);
  };
}

}  // namespace headcount::cli
