// A model directory as editable data and back: read every float tensor of model.safetensors
// into f32 tensors (checked against the config's weight table), and write a new directory
// (safetensors, config.json with the head layout, the tokenizer / sentence-transformers files)
// under a temporary name that is renamed to the final one only when every file is complete.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "compress/tensor_copy.h"
#include "headcount/compress.h"
#include "headcount/error.h"
#include "headcount/safetensors.h"
#include "io/atomic_file.h"

namespace headcount {

using detail::concat;
namespace fs = std::filesystem;

namespace {

// The files besides the weights and config.json that a sentence-transformers model directory
// needs; nothing else is copied (other weight formats, ONNX exports, READMEs would describe the
// unpruned model).
constexpr const char* kCopiedFiles[] = {"vocab.txt",
                                        "tokenizer.json",
                                        "tokenizer_config.json",
                                        "special_tokens_map.json",
                                        "modules.json",
                                        "sentence_bert_config.json",
                                        "config_sentence_transformers.json",
                                        "1_Pooling/config.json"};

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path.string(), "cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Removes a half-built directory unless released.
struct DirectoryGuard {
  fs::path path;
  bool keep = false;
  ~DirectoryGuard() {
    std::error_code ec;
    if (!keep) fs::remove_all(path, ec);
  }
};

}  // namespace

EncoderWeights read_encoder_weights(const std::string& model_dir) {
  EncoderWeights w{.source_dir = model_dir, .config = read_encoder_config(model_dir)};
  w.model.config = bert_definition(w.config);
  const SafetensorsFile file =
      SafetensorsFile::open((fs::path(model_dir) / "model.safetensors").string());
  const std::string prefix = bert_checkpoint_prefix(file);
  for (const SafetensorsEntry& e : file.entries()) {
    if (e.dtype != "F32" && e.dtype != "F16" && e.dtype != "BF16") continue;
    const std::string name = e.name.starts_with(prefix) ? e.name.substr(prefix.size()) : e.name;
    w.model.tensors.emplace(name, file.load_f32(e.name));
  }
  for (const model::WeightSpec& spec : model::weight_table(w.model.config)) {
    const auto it = w.model.tensors.find(spec.name);
    check(it != w.model.tensors.end(), concat(file.path(), ": tensor '", prefix + spec.name, "'"),
          "present", "missing");
    check(it->second.shape() == spec.shape,
          concat(file.path(), ": tensor '", prefix + spec.name, "'"),
          concat("shape ", shape_string(spec.shape)), it->second.view().shape_string());
  }
  return w;
}

void write_encoder_dir(const EncoderWeights& w, const std::string& out_dir) {
  const EncoderConfig& c = w.config;
  validate_head_layout(c, "weights");
  check(w.model.config == bert_definition(c), "weights", "a definition matching its config.json",
        "another one");
  for (const model::WeightSpec& spec : model::weight_table(bert_definition(c))) {
    const auto it = w.model.tensors.find(spec.name);
    check(it != w.model.tensors.end() && it->second.shape() == spec.shape,
          concat("weights: tensor '", spec.name, "'"),
          "present with the shape the head layout implies",
          it == w.model.tensors.end() ? "missing" : it->second.view().shape_string());
  }
  check(!out_dir.empty(), "--out", "a directory path", "an empty path");
  const fs::path out = fs::path(out_dir).lexically_normal();
  std::error_code ec;
  check(!fs::exists(out, ec) || (fs::is_directory(out, ec) && fs::is_empty(out, ec)), "--out",
        "a directory that does not exist yet (or is empty)", out.string());
  const fs::path parent = out.has_parent_path() ? out.parent_path() : fs::path(".");
  check(fs::is_directory(parent, ec), "--out", "a path whose parent directory exists",
        out.string());

  // 1. Everything goes into a sibling temporary directory first.
  const fs::path temp = parent / concat(".", out.filename().string(), ".partial.", ::getpid());
  fs::remove_all(temp, ec);
  if (!fs::create_directories(temp / "1_Pooling", ec))
    fail(temp.string(), concat("cannot create (", ec.message(), ")"));
  DirectoryGuard guard{.path = temp};

  // 2. Weights, in name order (the map's).
  std::vector<SafetensorsTensor> tensors;
  for (const auto& [name, tensor] : w.model.tensors)
    tensors.push_back({.name = name, .view = tensor.view()});
  write_safetensors((temp / "model.safetensors").string(), tensors, {{"format", "pt"}});

  // 3. config.json: the source's fields, with the head layout replaced.
  nlohmann::ordered_json config =
      nlohmann::ordered_json::parse(read_text(fs::path(w.source_dir) / "config.json"));
  config.erase("pruned_heads");
  config.erase("headcount_kv_heads");
  if (c.is_pruned()) {
    nlohmann::ordered_json pruned = nlohmann::ordered_json::object();
    for (std::size_t l = 0; l < c.pruned_heads.size(); ++l)
      if (!c.pruned_heads[l].empty()) pruned[std::to_string(l)] = c.pruned_heads[l];
    config["pruned_heads"] = pruned;
  }
  if (c.is_grouped()) config["headcount_kv_heads"] = c.kv_heads;
  io::write_file_atomically((temp / "config.json").string(), config.dump(2) + "\n");

  // 4. The tokenizer and sentence-transformers files, byte for byte.
  for (const char* name : kCopiedFiles)
    if (fs::is_regular_file(fs::path(w.source_dir) / name, ec))
      io::write_file_atomically((temp / name).string(), read_text(fs::path(w.source_dir) / name));
  if (fs::is_empty(temp / "1_Pooling", ec)) fs::remove(temp / "1_Pooling", ec);

  // 5. Into place: rename over the (absent or empty) final directory.
  if (fs::exists(out, ec)) fs::remove(out, ec);
  fs::rename(temp, out, ec);
  if (ec)
    fail(out.string(),
         concat("cannot move the finished model directory into place (", ec.message(), ")"));
  guard.keep = true;
}

BertEncoder encoder_from_weights(const EncoderWeights& w) {
  validate_head_layout(w.config, "weights");
  check(w.model.config == bert_definition(w.config), "weights",
        "a definition matching its config.json", "another one");
  // The tensors are copied (the caller keeps its weights: a sweep builds many encoders from
  // one set), checked against the table as a file's would be; only the vocabulary is read
  // from the source directory.
  const auto source = [&w](const std::string& name, const std::vector<std::int64_t>& shape) {
    const auto it = w.model.tensors.find(name);
    check(it != w.model.tensors.end() && it->second.dtype() == DType::f32 &&
              it->second.shape() == shape,
          concat("weights: tensor '", name, "'"),
          concat("an f32 tensor of shape ", shape_string(shape)),
          it == w.model.tensors.end()
              ? std::string("missing")
              : concat(dtype_name(it->second.dtype()), " ", it->second.view().shape_string()));
    return compress::clone(it->second);
  };
  WordPieceTokenizer tokenizer = WordPieceTokenizer::from_vocab_file(
      (fs::path(w.source_dir) / "vocab.txt").string(), w.config.tokenizer);
  return BertEncoder(w.config, source, std::move(tokenizer));
}

}  // namespace headcount
