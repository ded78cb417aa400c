#include "headcount/model_files.h"

#include <filesystem>
#include <fstream>

#include "headcount/error.h"

namespace headcount {

namespace fs = std::filesystem;
using detail::concat;

const char* model_format_name(ModelFormat format) {
  switch (format) {
    case ModelFormat::encoder_directory:
      return "an encoder directory";
    case ModelFormat::gguf:
      return "a GGUF file";
    case ModelFormat::checkpoint:
      return "a headcount checkpoint directory";
  }
  return "?";
}

ModelFormat model_format(const std::string& path, const std::string& option) {
  std::error_code ec;
  const auto expected =
      "an encoder directory (config.json + model.safetensors), a GGUF file or a headcount "
      "checkpoint directory (checkpoint.safetensors)";
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    if (fs::is_regular_file(dir / "checkpoint.safetensors", ec)) return ModelFormat::checkpoint;
    if (fs::is_regular_file(dir / "config.json", ec) &&
        fs::is_regular_file(dir / "model.safetensors", ec))
      return ModelFormat::encoder_directory;
    fail(option, concat("expected ", expected, ", got ", path,
                        " (a directory with neither model.safetensors + config.json nor "
                        "checkpoint.safetensors)"));
  }
  if (fs::is_regular_file(path, ec)) {
    std::ifstream in(path, std::ios::binary);
    char magic[4] = {};
    in.read(magic, 4);
    if (in.gcount() == 4 && std::string(magic, 4) == "GGUF") return ModelFormat::gguf;
    fail(option, concat("expected ", expected, ", got ", path, " (a file that is not GGUF)"));
  }
  fail(option, concat("expected ", expected, ", got ", path, " (no such file or directory)"));
}

}  // namespace headcount
