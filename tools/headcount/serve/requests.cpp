#include "requests.h"

#include <nlohmann/json.hpp>

namespace headcount::serve {
namespace {

using json = nlohmann::json;

// The JSON type as a client would name it, for "expected X, got <type>".
std::string type_name(const json& value) {
  switch (value.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "a list";
    case json::value_t::object:
      return "an object";
    case json::value_t::binary:
      return "binary";
    case json::value_t::discarded:
      return "invalid JSON";
    default:
      return "a number";
  }
}

// The body as a JSON object, or 400: malformed JSON names no field (param null), since none
// could be read; a body that is valid JSON but not an object names the body itself.
json parse_object(std::string_view body) {
  json value = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded())
    throw ApiError(400, "body: expected a JSON object, got malformed JSON", "invalid_request_error",
                   "", "invalid_json");
  if (!value.is_object()) throw invalid_field("body", "a JSON object", type_name(value));
  return value;
}

// A string or a list of strings (at least one, at most kMaxInputsPerRequest) under `field`.
std::vector<std::string> string_or_list(const json& object, const std::string& field) {
  const auto it = object.find(field);
  if (it == object.end()) throw invalid_field(field, "a string or a list of strings", "nothing");
  if (it->is_string()) return {it->get<std::string>()};
  if (!it->is_array()) throw invalid_field(field, "a string or a list of strings", type_name(*it));
  if (it->empty()) throw invalid_field(field, "at least one string", "an empty list");
  if (it->size() > kMaxInputsPerRequest)
    throw invalid_field(field, "at most " + std::to_string(kMaxInputsPerRequest) + " strings",
                        std::to_string(it->size()));
  std::vector<std::string> inputs;
  inputs.reserve(it->size());
  for (std::size_t i = 0; i < it->size(); ++i) {
    const json& item = (*it)[i];
    if (!item.is_string())
      throw invalid_field(field + "[" + std::to_string(i) + "]",
                          "a string (token arrays are not supported)", type_name(item));
    inputs.push_back(item.get<std::string>());
  }
  return inputs;
}

// An optional boolean: absent or null keeps `fallback`.
bool optional_bool(const json& object, const std::string& field, bool fallback) {
  const auto it = object.find(field);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) throw invalid_field(field, "true or false", type_name(*it));
  return it->get<bool>();
}

}  // namespace

EmbeddingsRequest parse_embeddings_request(std::string_view body) {
  const json object = parse_object(body);
  EmbeddingsRequest request;
  request.inputs = string_or_list(object, "input");
  const auto model = object.find("model");
  if (model == object.end() || !model->is_string())
    throw invalid_field("model", "the model's name (a string; GET /v1/models lists it)",
                        model == object.end() ? "nothing" : type_name(*model));
  request.model = model->get<std::string>();
  if (const auto format = object.find("encoding_format");
      format != object.end() && !format->is_null()) {
    if (!format->is_string() ||
        (format->get<std::string>() != "float" && format->get<std::string>() != "base64"))
      throw invalid_field(
          "encoding_format", "\"float\" or \"base64\"",
          format->is_string() ? "\"" + format->get<std::string>() + "\"" : type_name(*format));
    request.base64 = format->get<std::string>() == "base64";
  }
  if (const auto dims = object.find("dimensions"); dims != object.end() && !dims->is_null()) {
    if (!dims->is_number_integer() || dims->get<long long>() < 1)
      throw invalid_field("dimensions", "a positive integer",
                          dims->is_number() ? dims->dump() : type_name(*dims));
    request.dimensions = dims->get<long long>();
  }
  return request;
}

TeiEmbedRequest parse_tei_embed_request(std::string_view body) {
  const json object = parse_object(body);
  TeiEmbedRequest request;
  request.inputs = string_or_list(object, "inputs");
  request.truncate = optional_bool(object, "truncate", false);
  request.normalize = optional_bool(object, "normalize", true);
  return request;
}

TokenizeRequest parse_tokenize_request(std::string_view body) {
  const json object = parse_object(body);
  TokenizeRequest request;
  request.inputs = string_or_list(object, "inputs");
  request.add_special_tokens = optional_bool(object, "add_special_tokens", true);
  return request;
}

}  // namespace headcount::serve
