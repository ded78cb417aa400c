// The model directory: where it is, what it must hold, and what its JSON files say.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "headcount/encoder.h"
#include "headcount/error.h"

#ifndef HEADCOUNT_DEFAULT_MODEL_DIR
#define HEADCOUNT_DEFAULT_MODEL_DIR "models/all-MiniLM-L6-v2"
#endif

namespace headcount {

using detail::concat;
using nlohmann::json;
namespace fs = std::filesystem;

std::string default_model_dir() { return HEADCOUNT_DEFAULT_MODEL_DIR; }

void check_model_dir(const std::string& dir) {
  const char* expected = "a directory with model.safetensors, config.json, vocab.txt";
  std::error_code ec;
  if (dir.empty()) fail("model", concat("expected ", expected, ", got an empty path"));
  if (!fs::is_directory(dir, ec))
    fail("model", concat("expected ", expected, ", got ", dir,
                         fs::exists(dir, ec) ? " (not a directory)" : " (no such directory)"));
  std::string missing;
  for (const char* name : {"model.safetensors", "config.json", "vocab.txt"})
    if (!fs::is_regular_file(fs::path(dir) / name, ec))
      missing += missing.empty() ? name : concat(", ", name);
  if (!missing.empty())
    fail("model", concat("expected ", expected, ", got ", dir, " (missing ", missing, ")"));
}

namespace {

// A JSON object from a file; Error names the file if it is missing, malformed or not an object.
json read_json(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path.string(), "cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  json value;
  try {
    value = json::parse(text.str());
  } catch (const json::exception& e) {  // parse_error, and out_of_range for 1e4002
    fail(path.string(), concat("malformed JSON (", e.what(), ")"));
  }
  check(value.is_object(), path.string(), "a JSON object", value.type_name());
  return value;
}

std::int64_t positive_int(const json& config, const std::string& file, const char* key) {
  const auto it = config.find(key);
  check(it != config.end(), concat(file, ": ", key), "a positive integer", "nothing");
  check(it->is_number_integer() && it->get<std::int64_t>() >= 1 &&
            it->get<std::int64_t>() <= (1 << 24),
        concat(file, ": ", key), "a positive integer", it->dump());
  return it->get<std::int64_t>();
}

bool optional_bool(const json& config, const std::string& file, const char* key, bool fallback) {
  const auto it = config.find(key);
  if (it == config.end() || it->is_null()) return fallback;
  check(it->is_boolean(), concat(file, ": ", key), "true or false", it->dump());
  return it->get<bool>();
}

// "pruned_heads": {"<layer>": [head, ...]} (Hugging Face writes the keys as strings) and
// "headcount_kv_heads": n or [n per layer]. Hugging Face accepts the heads of a layer in any
// order and repeated; they are sorted and deduplicated here, as its pruning does with a set.
void read_head_layout(const json& config, const std::string& file, EncoderConfig& c) {
  if (const auto it = config.find("pruned_heads"); it != config.end() && !it->is_null()) {
    const std::string where = file + ": pruned_heads";
    check(it->is_object(), where, "an object {\"layer\": [head indices]}", it->dump());
    c.pruned_heads.assign(static_cast<std::size_t>(c.layers), {});
    for (const auto& [key, heads] : it->items()) {
      std::int64_t layer = -1;
      try {
        std::size_t used = 0;
        layer = std::stoll(key, &used);
        if (used != key.size()) layer = -1;
      } catch (const std::exception&) {
        layer = -1;
      }
      check(layer >= 0 && layer < c.layers, where + " key",
            concat("a layer index in [0, ", c.layers, ")"), concat("\"", key, "\""));
      check(heads.is_array(), concat(where, "[", key, "]"), "an array of head indices",
            heads.dump());
      std::vector<std::int64_t>& list = c.pruned_heads[static_cast<std::size_t>(layer)];
      for (const json& h : heads) {
        check(
            h.is_number_integer() && h.get<std::int64_t>() >= 0 && h.get<std::int64_t>() < c.heads,
            concat(where, "[", key, "]"), concat("head indices in [0, ", c.heads, ")"), h.dump());
        list.push_back(h.get<std::int64_t>());
      }
      std::sort(list.begin(), list.end());
      list.erase(std::unique(list.begin(), list.end()), list.end());
    }
  }
  if (const auto it = config.find("headcount_kv_heads"); it != config.end() && !it->is_null()) {
    const std::string where = file + ": headcount_kv_heads";
    auto value = [&](const json& v) {
      check(v.is_number_integer() && v.get<std::int64_t>() >= 1, where, "positive integers",
            v.dump());
      return v.get<std::int64_t>();
    };
    if (it->is_array()) {
      check(static_cast<std::int64_t>(it->size()) == c.layers, where,
            concat(c.layers, " entries (one per layer)"), it->size());
      for (const json& v : *it) c.kv_heads.push_back(value(v));
    } else {
      c.kv_heads.assign(static_cast<std::size_t>(c.layers), value(*it));
    }
  }
  validate_head_layout(c, file);
}

}  // namespace

std::int64_t EncoderConfig::layer_heads(std::int64_t layer) const {
  return pruned_heads.empty()
             ? heads
             : heads -
                   static_cast<std::int64_t>(pruned_heads[static_cast<std::size_t>(layer)].size());
}
std::int64_t EncoderConfig::layer_kv_heads(std::int64_t layer) const {
  return kv_heads.empty() ? layer_heads(layer) : kv_heads[static_cast<std::size_t>(layer)];
}
std::int64_t EncoderConfig::head_offset(std::int64_t layer) const {
  std::int64_t offset = 0;
  for (std::int64_t l = 0; l < layer; ++l) offset += layer_heads(l);
  return offset;
}
std::int64_t EncoderConfig::total_heads() const { return head_offset(layers); }
std::int64_t EncoderConfig::original_head(std::int64_t layer, std::int64_t head) const {
  if (pruned_heads.empty()) return head;
  // The head-th index of 0..heads-1 that is not in the layer's (sorted) pruned list.
  std::int64_t original = head;
  for (std::int64_t removed : pruned_heads[static_cast<std::size_t>(layer)])
    if (removed <= original) ++original;
  return original;
}
bool EncoderConfig::is_pruned() const {
  for (const auto& list : pruned_heads)
    if (!list.empty()) return true;
  return false;
}
bool EncoderConfig::is_grouped() const {
  for (std::int64_t l = 0; l < layers; ++l)
    if (layer_kv_heads(l) != layer_heads(l)) return true;
  return false;
}

void validate_head_layout(const EncoderConfig& c, const std::string& where) {
  check(c.pruned_heads.empty() || static_cast<std::int64_t>(c.pruned_heads.size()) == c.layers,
        where + ": pruned_heads", concat("one list per layer (", c.layers, ")"),
        c.pruned_heads.size());
  for (std::size_t l = 0; l < c.pruned_heads.size(); ++l) {
    const auto& list = c.pruned_heads[l];
    for (std::size_t i = 0; i < list.size(); ++i)
      check(list[i] >= 0 && list[i] < c.heads && (i == 0 || list[i] > list[i - 1]),
            concat(where, ": pruned_heads[", l, "]"),
            concat("ascending distinct heads in [0, ", c.heads, ")"), list[i]);
    // A layer without heads would need zero-width projections, which neither headcount's
    // layer nor the safetensors format (no empty tensors written here) carries.
    check(static_cast<std::int64_t>(list.size()) < c.heads,
          concat(where, ": pruned_heads[", l, "]"),
          concat("at most ", c.heads - 1, " heads (one must stay)"), list.size());
  }
  check(c.kv_heads.empty() || static_cast<std::int64_t>(c.kv_heads.size()) == c.layers,
        where + ": kv_heads", concat("one count per layer (", c.layers, ")"), c.kv_heads.size());
  for (std::int64_t l = 0; l < static_cast<std::int64_t>(c.kv_heads.size()); ++l) {
    const std::int64_t h = c.layer_heads(l), g = c.kv_heads[static_cast<std::size_t>(l)];
    check(g >= 1 && h % g == 0, concat(where, ": kv_heads[", l, "]"),
          concat("a divisor of the layer's ", h, " query heads"), g);
  }
}

EncoderConfig read_encoder_config(const std::string& model_dir) {
  check_model_dir(model_dir);
  const fs::path dir(model_dir);
  EncoderConfig c;

  // config.json: the architecture.
  const std::string config_path = (dir / "config.json").string();
  const json config = read_json(config_path);
  c.vocab_size = positive_int(config, config_path, "vocab_size");
  c.hidden_size = positive_int(config, config_path, "hidden_size");
  c.layers = positive_int(config, config_path, "num_hidden_layers");
  // The weight table holds 16 named entries per layer: 2^24 layers would be 2^28 of them,
  // gigabytes before the checkpoint could refute the count (fuzz/fuzz_encoder_config trips on it).
  constexpr std::int64_t kMaxLayers = 1024;
  check(c.layers <= kMaxLayers, config_path + ": num_hidden_layers", concat("1 to ", kMaxLayers),
        c.layers);
  c.heads = positive_int(config, config_path, "num_attention_heads");
  c.intermediate_size = positive_int(config, config_path, "intermediate_size");
  c.max_position_embeddings = positive_int(config, config_path, "max_position_embeddings");
  c.type_vocab_size = positive_int(config, config_path, "type_vocab_size");
  check(c.hidden_size % c.heads == 0, config_path + ": num_attention_heads",
        concat("a divisor of hidden_size = ", c.hidden_size), c.heads);
  const auto eps = config.find("layer_norm_eps");
  check(eps != config.end() && eps->is_number() && eps->get<double>() > 0 && eps->get<double>() < 1,
        config_path + ": layer_norm_eps", "a number in (0, 1)",
        eps == config.end() ? "nothing" : eps->dump());
  c.layer_norm_eps = eps->get<float>();
  // 1e-300 is in (0, 1) as a double but 0 as a float, and an eps of 0 divides by zero on a
  // constant row (fuzz/fuzz_encoder_config trips on it).
  check(c.layer_norm_eps > 0, config_path + ": layer_norm_eps",
        "a number in (0, 1) that is not 0 as a float", eps->dump());
  const auto act = config.find("hidden_act");
  check(act != config.end() && *act == "gelu", config_path + ": hidden_act",
        "\"gelu\" (the exact erf form)", act == config.end() ? "nothing" : act->dump());
  if (const auto type = config.find("model_type"); type != config.end())
    check(*type == "bert", config_path + ": model_type", "\"bert\"", type->dump());
  if (const auto pos = config.find("position_embedding_type"); pos != config.end())
    check(*pos == "absolute", config_path + ": position_embedding_type", "\"absolute\"",
          pos->dump());
  read_head_layout(config, config_path, c);

  // tokenizer_config.json: casing and accents (BERT uncased when absent).
  if (fs::exists(dir / "tokenizer_config.json")) {
    const std::string path = (dir / "tokenizer_config.json").string();
    const json tok = read_json(path);
    c.tokenizer.lowercase = optional_bool(tok, path, "do_lower_case", true);
    c.tokenizer.strip_accents = optional_bool(tok, path, "strip_accents", c.tokenizer.lowercase);
    c.tokenizer.tokenize_chinese_chars = optional_bool(tok, path, "tokenize_chinese_chars", true);
  }

  // sentence_bert_config.json: sentence-transformers' max_seq_length (256 for all-MiniLM-L6-v2),
  // which is what it truncates at, not the tokenizer's 128 or 512. Without the file:
  // max_position_embeddings.
  c.tokenizer.max_length = c.max_position_embeddings;
  if (fs::exists(dir / "sentence_bert_config.json")) {
    const std::string path = (dir / "sentence_bert_config.json").string();
    const json sbert = read_json(path);
    if (sbert.contains("max_seq_length"))
      c.tokenizer.max_length = positive_int(sbert, path, "max_seq_length");
    check(!optional_bool(sbert, path, "do_lower_case", false) || c.tokenizer.lowercase,
          path + ": do_lower_case", "false (lower-casing is the tokenizer's job here)", "true");
  }
  check(c.tokenizer.max_length >= 2 && c.tokenizer.max_length <= c.max_position_embeddings,
        "max_seq_length",
        concat("in [2, max_position_embeddings = ", c.max_position_embeddings, "]"),
        c.tokenizer.max_length);

  // 1_Pooling/config.json: only mean pooling is implemented.
  if (fs::exists(dir / "1_Pooling" / "config.json")) {
    const std::string path = (dir / "1_Pooling" / "config.json").string();
    const json pooling = read_json(path);
    check(optional_bool(pooling, path, "pooling_mode_mean_tokens", true),
          path + ": pooling_mode_mean_tokens", "true (headcount implements mean pooling)", "false");
    for (const char* other :
         {"pooling_mode_cls_token", "pooling_mode_max_tokens", "pooling_mode_mean_sqrt_len_tokens"})
      check(!optional_bool(pooling, path, other, false), concat(path, ": ", other),
            "false (headcount implements mean pooling only)", "true");
  }

  // modules.json: a Normalize module means L2 normalisation. Without the file: normalise.
  if (fs::exists(dir / "modules.json")) {
    const std::string path = (dir / "modules.json").string();
    std::ifstream in(dir / "modules.json");
    json modules;
    try {
      modules = json::parse(in);
    } catch (const json::exception& e) {  // parse_error, and out_of_range for 1e4002
      fail(path, concat("malformed JSON (", e.what(), ")"));
    }
    check(modules.is_array(), path, "a JSON array of modules", modules.type_name());
    c.normalize = false;
    // json::value("type", "") would throw type_error on a non-string "type" (found by
    // fuzz_encoder_config: tests/testdata/fuzz-regressions/encoder_config-module-type-number).
    for (std::size_t i = 0; i < modules.size(); ++i) {
      const json& m = modules[i];
      if (!m.is_object() || !m.contains("type")) continue;
      const json& type = m["type"];
      check(type.is_string(), concat(path, ": module ", i, " \"type\""), "a string",
            type.type_name());
      if (type.get<std::string>().ends_with("Normalize")) c.normalize = true;
    }
  }
  return c;
}

model::Config bert_definition(const EncoderConfig& c) {
  model::Config m{.family = model::Family::bert,
                  .vocab = c.vocab_size,
                  .d_model = c.hidden_size,
                  .d_ff = c.intermediate_size,
                  .head_dim = c.head_dim(),
                  .context = c.max_position_embeddings,
                  .norm = model::NormKind::layer_norm,
                  .placement = model::NormPlacement::post,
                  .norm_eps = c.layer_norm_eps,
                  .activation = model::Activation::gelu_erf,
                  .positions = model::Positions::learned,
                  .token_types = c.type_vocab_size,
                  .embedding_norm = true,
                  .attention_bias = true,
                  .ffn_bias = true,
                  .causal = false,
                  .output = model::Output::hidden,
                  .output_bias = false};
  for (std::int64_t l = 0; l < c.layers; ++l)
    m.layers.push_back({.heads = c.layer_heads(l), .kv_heads = c.layer_kv_heads(l)});
  return m;
}

}  // namespace headcount
