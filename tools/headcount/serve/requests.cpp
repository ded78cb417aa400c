#include "requests.h"

#include <algorithm>
#include <climits>
#include <cstdint>
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

// An optional number in [lo, hi] under `field`; absent or null keeps `fallback`.
double optional_number(const json& object, const std::string& field, double fallback, double lo,
                       double hi, const std::string& expected) {
  const auto it = object.find(field);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_number()) throw invalid_field(field, expected, type_name(*it));
  const double value = it->get<double>();
  if (!(value >= lo && value <= hi)) throw invalid_field(field, expected, it->dump());
  return value;
}

// An optional integer in [lo, hi]; absent or null keeps `fallback`.
long long optional_integer(const json& object, const std::string& field, long long fallback,
                           long long lo, long long hi, const std::string& expected) {
  const auto it = object.find(field);
  if (it == object.end() || it->is_null()) return fallback;
  if (!it->is_number_integer())
    throw invalid_field(field, expected, it->is_number() ? it->dump() : type_name(*it));
  if (it->is_number_unsigned() &&
      it->get<unsigned long long>() > static_cast<unsigned long long>(hi))
    throw invalid_field(field, expected, it->dump());
  const long long value = it->get<long long>();
  if (value < lo || value > hi) throw invalid_field(field, expected, it->dump());
  return value;
}

std::string model_name(const json& object) {
  const auto model = object.find("model");
  if (model == object.end() || !model->is_string())
    throw invalid_field("model", "the model's name (a string; GET /v1/models lists it)",
                        model == object.end() ? "nothing" : type_name(*model));
  return model->get<std::string>();
}

// A chat message's content: a string, or a list of {"type": "text", "text": ...} parts, joined.
std::string message_content(const json& message, const std::string& field) {
  const auto it = message.find("content");
  if (it == message.end() || it->is_null())
    throw invalid_field(field + ".content", "a string or a list of text parts", "nothing");
  if (it->is_string()) return it->get<std::string>();
  if (!it->is_array())
    throw invalid_field(field + ".content", "a string or a list of text parts", type_name(*it));
  std::string text;
  for (std::size_t i = 0; i < it->size(); ++i) {
    const json& part = (*it)[i];
    const std::string where = field + ".content[" + std::to_string(i) + "]";
    if (!part.is_object() || part.value("type", json()) != "text" || !part.contains("text") ||
        !part["text"].is_string())
      throw invalid_field(where, "{\"type\": \"text\", \"text\": \"...\"} (only text parts)",
                          part.is_object() ? part.dump().substr(0, 80) : type_name(part));
    text += part["text"].get<std::string>();
  }
  return text;
}

}  // namespace

CompletionRequest parse_completion_request(std::string_view body, bool chat) {
  const json object = parse_object(body);
  CompletionRequest r;
  r.chat = chat;
  r.model = model_name(object);
  // What this server does not do is refused by name, not ignored.
  for (const char* field : {"logit_bias", "tools", "tool_choice", "functions", "function_call",
                            "response_format", "suffix", "best_of"}) {
    const auto it = object.find(field);
    if (it != object.end() && !it->is_null())
      throw invalid_field(field, "absent (not supported by headcount serve)",
                          it->dump().substr(0, 80));
  }
  for (const char* field : {"presence_penalty", "frequency_penalty"})
    if (optional_number(object, field, 0, -2, 2, "a number in [-2, 2]") != 0)
      throw invalid_field(field, "0 or absent (penalties are not supported)",
                          object.at(field).dump());
  if (optional_integer(object, "n", 1, 1, 1 << 20, "a positive integer") != 1)
    throw invalid_field("n", "1 (one choice per request: send n requests)", object.at("n").dump());

  if (chat) {
    const auto it = object.find("messages");
    if (it == object.end() || !it->is_array())
      throw invalid_field("messages", "a list of messages",
                          it == object.end() ? "nothing" : type_name(*it));
    if (it->empty()) throw invalid_field("messages", "at least one message", "an empty list");
    for (std::size_t i = 0; i < it->size(); ++i) {
      const json& m = (*it)[i];
      const std::string field = "messages[" + std::to_string(i) + "]";
      if (!m.is_object()) throw invalid_field(field, "an object", type_name(m));
      const auto role = m.find("role");
      if (role == m.end() || !role->is_string() ||
          (*role != "system" && *role != "user" && *role != "assistant" && *role != "developer"))
        throw invalid_field(field + ".role", "\"system\", \"user\" or \"assistant\"",
                            role == m.end() ? "nothing" : role->dump().substr(0, 80));
      // OpenAI's "developer" role is its newer name for "system".
      r.messages.push_back({.role = *role == "developer" ? "system" : role->get<std::string>(),
                            .content = message_content(m, field)});
    }
    const bool logprobs = optional_bool(object, "logprobs", false);
    const long long top = optional_integer(object, "top_logprobs", -1, 0, 20, "an integer 0 to 20");
    if (top >= 0 && !logprobs)
      throw invalid_field("top_logprobs", "absent unless \"logprobs\" is true",
                          std::to_string(top));
    r.top_logprobs = logprobs ? static_cast<int>(std::max(top, 0LL)) : -1;
    r.max_tokens =
        optional_integer(object, "max_completion_tokens", -1, 1, 1LL << 30, "a positive integer");
    if (r.max_tokens < 0)
      r.max_tokens = optional_integer(object, "max_tokens", -1, 1, 1LL << 30, "a positive integer");
  } else {
    const auto it = object.find("prompt");
    if (it == object.end())
      throw invalid_field("prompt", "a string, a list of one string, or a list of token ids",
                          "nothing");
    if (it->is_string()) {
      r.prompt = it->get<std::string>();
    } else if (it->is_array() && it->size() == 1 && (*it)[0].is_string()) {
      r.prompt = (*it)[0].get<std::string>();
    } else if (it->is_array() && !it->empty() && (*it)[0].is_number()) {
      for (std::size_t i = 0; i < it->size(); ++i) {
        const json& id = (*it)[i];
        if (!id.is_number_integer() || id.get<long long>() < 0 || id.get<long long>() > INT32_MAX)
          throw invalid_field("prompt[" + std::to_string(i) + "]", "a token id",
                              id.is_number() ? id.dump() : type_name(id));
        r.token_ids.push_back(static_cast<std::int32_t>(id.get<long long>()));
      }
    } else {
      throw invalid_field(
          "prompt",
          "a string, a list of one string, or a list of token ids (one prompt "
          "per request)",
          it->is_array() ? "a list of " + std::to_string(it->size()) + " items" : type_name(*it));
    }
    r.echo = optional_bool(object, "echo", false);
    r.top_logprobs =
        static_cast<int>(optional_integer(object, "logprobs", -1, 0, 5, "an integer 0 to 5"));
    // echo with max_tokens 0 scores the prompt alone (evaluation harnesses ask so).
    r.max_tokens = optional_integer(object, "max_tokens", 16, r.echo ? 0 : 1, 1LL << 30,
                                    r.echo ? "an integer >= 0" : "a positive integer");
  }
  r.temperature =
      static_cast<float>(optional_number(object, "temperature", 1, 0, 2, "a number in [0, 2]"));
  r.top_p = static_cast<float>(optional_number(object, "top_p", 1, 0, 1, "a number in (0, 1]"));
  if (r.top_p <= 0) throw invalid_field("top_p", "a number in (0, 1]", object.at("top_p").dump());
  if (const auto it = object.find("seed"); it != object.end() && !it->is_null()) {
    if (!it->is_number_integer())
      throw invalid_field("seed", "an integer", it->is_number() ? it->dump() : type_name(*it));
    // Any 64-bit integer; a negative one is taken modulo 2^64 (generate --seed takes 0 to 2^64-1).
    r.seed = it->is_number_unsigned() ? it->get<std::uint64_t>()
                                      : static_cast<std::uint64_t>(it->get<std::int64_t>());
  }
  if (const auto it = object.find("stop"); it != object.end() && !it->is_null()) {
    if (it->is_string()) {
      r.stop.push_back(it->get<std::string>());
    } else if (it->is_array() && it->size() <= 4) {
      for (std::size_t i = 0; i < it->size(); ++i) {
        if (!(*it)[i].is_string())
          throw invalid_field("stop[" + std::to_string(i) + "]", "a string", type_name((*it)[i]));
        r.stop.push_back((*it)[i].get<std::string>());
      }
    } else {
      throw invalid_field(
          "stop", "a string or a list of up to 4 strings",
          it->is_array() ? "a list of " + std::to_string(it->size()) : type_name(*it));
    }
    for (std::size_t i = 0; i < r.stop.size(); ++i)
      if (r.stop[i].empty())
        throw invalid_field("stop[" + std::to_string(i) + "]", "a non-empty string", "\"\"");
  }
  r.ignore_eos = optional_bool(object, "ignore_eos", false);
  r.stream = optional_bool(object, "stream", false);
  if (const auto it = object.find("stream_options"); it != object.end() && !it->is_null()) {
    if (!it->is_object()) throw invalid_field("stream_options", "an object", type_name(*it));
    if (!r.stream)
      throw invalid_field("stream_options", "absent unless \"stream\" is true", it->dump());
    r.include_usage = optional_bool(*it, "include_usage", false);
  }
  return r;
}

std::vector<std::int64_t> parse_detokenize_request(std::string_view body) {
  const json object = parse_object(body);
  const auto it = object.find("tokens");
  if (it == object.end() || !it->is_array())
    throw invalid_field("tokens", "a list of token ids",
                        it == object.end() ? "nothing" : type_name(*it));
  std::vector<std::int64_t> ids;
  for (std::size_t i = 0; i < it->size(); ++i) {
    const json& id = (*it)[i];
    if (!id.is_number_integer())
      throw invalid_field("tokens[" + std::to_string(i) + "]", "a token id",
                          id.is_number() ? id.dump() : type_name(id));
    ids.push_back(id.is_number_unsigned() && id.get<unsigned long long>() > INT64_MAX
                      ? INT64_MAX
                      : id.get<std::int64_t>());
  }
  return ids;
}

DecoderTokenizeRequest parse_decoder_tokenize_request(std::string_view body) {
  const json object = parse_object(body);
  const auto it = object.find("content");
  if (it == object.end() || !it->is_string())
    throw invalid_field("content", "a string", it == object.end() ? "nothing" : type_name(*it));
  return {.content = it->get<std::string>(),
          .parse_special = optional_bool(object, "parse_special", true),
          .with_pieces = optional_bool(object, "with_pieces", false)};
}

bool is_decoder_tokenize_request(std::string_view body) {
  const json value = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  return value.is_object() && value.contains("content") && !value.contains("inputs");
}

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
