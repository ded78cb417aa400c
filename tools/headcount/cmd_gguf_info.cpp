// `headcount gguf-info FILE [--json]`: a GGUF file's header, metadata and tensor table, as the
// reader validated them (a bad file is one line and exit 2). Arrays show their element type,
// length and first elements; strings are JSON-escaped (any invalid UTF-8 as U+FFFD), so a
// hostile file cannot write control characters to the terminal.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "headcount/error.h"
#include "headcount/gguf.h"

namespace headcount::cli {
namespace {

using json = nlohmann::ordered_json;  // keys in file order

constexpr std::size_t kArrayShown = 8;  // elements of an array shown

std::string type_name(GgufValueType t) {
  return gguf_value_type_name(static_cast<std::uint32_t>(t));
}

json value_json(const GgufFile& f, const GgufKeyValue& kv) {
  const GgufValue& v = kv.value;
  json out = {{"type", type_name(v.type)}};
  switch (v.type) {
    case GgufValueType::string:
      out["value"] = v.text;
      break;
    case GgufValueType::float32:
    case GgufValueType::float64:
      out["value"] = v.real;
      break;
    case GgufValueType::boolean:
      out["value"] = v.integer != 0;
      break;
    case GgufValueType::uint64:
      out["value"] = static_cast<std::uint64_t>(v.integer);
      break;
    case GgufValueType::array: {
      out["element_type"] = type_name(v.element_type);
      out["count"] = v.count;
      json first = json::array();
      if (v.element_type == GgufValueType::string) {
        for (std::size_t i = 0; i < v.strings.size() && i < kArrayShown; ++i)
          first.push_back(v.strings[i]);
      } else if (v.element_type == GgufValueType::float32 ||
                 v.element_type == GgufValueType::float64) {
        const auto values = f.get_float_array(kv.key);
        for (std::size_t i = 0; i < values.size() && i < kArrayShown; ++i)
          first.push_back(values[i]);
      } else if (v.element_type == GgufValueType::uint64) {
        // Raw: a uint64 element may exceed INT64_MAX, which get_int_array refuses.
        for (std::size_t i = 0; i < v.count && i < kArrayShown; ++i) {
          std::uint64_t x = 0;
          for (int b = 7; b >= 0; --b)
            x = (x << 8) |
                std::to_integer<std::uint64_t>(v.raw[i * 8 + static_cast<std::size_t>(b)]);
          first.push_back(x);
        }
      } else {
        const auto values = f.get_int_array(kv.key);
        for (std::size_t i = 0; i < values.size() && i < kArrayShown; ++i)
          first.push_back(values[i]);
      }
      out["first"] = first;
      break;
    }
    default:
      out["value"] = v.integer;
      break;
  }
  return out;
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void run_gguf_info(const std::string& path, bool as_json) {
  const GgufFile f = GgufFile::open(path);
  json meta = json::object();
  for (const GgufKeyValue& kv : f.metadata()) meta[kv.key] = value_json(f, kv);
  json tensors = json::array();
  for (const GgufTensorInfo& t : f.tensors())
    tensors.push_back({{"name", t.name},
                       {"type", ggml_type_name(t.type)},
                       {"ne", t.ne},
                       {"shape", t.shape()},
                       {"offset", t.offset},
                       {"bytes", t.bytes}});
  if (as_json) {
    const json out = {{"path", path},
                      {"version", f.version()},
                      {"file_size", f.file_size()},
                      {"alignment", f.alignment()},
                      {"data_offset", f.data_offset()},
                      {"metadata", meta},
                      {"tensors", tensors}};
    std::printf("%s\n", dump(out).c_str());
    return;
  }
  std::printf(
      "%s: GGUF v%u, %zu metadata keys, %zu tensors, alignment %llu, data at byte %llu of %llu\n",
      dump(path).c_str(), f.version(), f.metadata().size(), f.tensors().size(),
      static_cast<unsigned long long>(f.alignment()),
      static_cast<unsigned long long>(f.data_offset()),
      static_cast<unsigned long long>(f.file_size()));
  std::printf("\nmetadata:\n");
  for (const GgufKeyValue& kv : f.metadata()) {
    const json& v = meta[kv.key];
    std::string shown;
    if (kv.value.type == GgufValueType::array) {
      shown = "array of " + v["element_type"].get<std::string>() + " [" +
              std::to_string(kv.value.count) + "] " + dump(v["first"]) +
              (kv.value.count > kArrayShown ? " ..." : "");
    } else {
      shown = type_name(kv.value.type) + " " + dump(v["value"]);
      if (shown.size() > 120) shown = shown.substr(0, 117) + "...";
    }
    std::printf("  %-40s %s\n", dump(kv.key).c_str(), shown.c_str());
  }
  std::printf("\ntensors (shape row-major; ne as stored, innermost first):\n");
  std::printf("  %-36s %-6s %-16s %-16s %12s %12s\n", "name", "type", "shape", "ne", "offset",
              "bytes");
  for (const GgufTensorInfo& t : f.tensors())
    std::printf("  %-36s %-6s %-16s %-16s %12llu %12llu\n", dump(t.name).c_str(),
                ggml_type_name(t.type).c_str(), shape_string(t.shape()).c_str(),
                shape_string(t.ne).c_str(), static_cast<unsigned long long>(t.offset),
                static_cast<unsigned long long>(t.bytes));
}

}  // namespace

void register_gguf_info(CLI::App& app) {
  auto path = std::make_shared<std::string>();
  auto as_json = std::make_shared<bool>(false);
  CLI::App* cmd =
      app.add_subcommand("gguf-info", "Print a GGUF file's metadata and tensor table (validated)");
  cmd->add_option("file", *path, "The .gguf file")->required();
  cmd->add_flag("--json", *as_json, "Print one JSON object");
  cmd->callback([path, as_json] { run_gguf_info(*path, *as_json); });
}

}  // namespace headcount::cli
