#include "embedding_routes.h"

#include <bit>
#include <charconv>
#include <nlohmann/json.hpp>

#include "api_error.h"
#include "requests.h"

namespace headcount::serve {
namespace {

// A float as JSON: the shortest decimal of its exact double value. A client that reads it as a
// double and rounds to float32 gets the original bits back (the float's own shortest decimal,
// read as a double first, could round differently in rare cases). OpenAI writes its floats so.
void append_float(std::string& out, float value) {
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, static_cast<double>(value));
  out.append(buffer, result.ptr);
}

void append_float_list(std::string& out, const float* values, std::int64_t count) {
  out += '[';
  for (std::int64_t k = 0; k < count; ++k) {
    if (k) out += ',';
    append_float(out, values[k]);
  }
  out += ']';
}

}  // namespace

std::string base64_float32(const float* values, std::size_t count) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::vector<unsigned char> bytes(count * 4);
  for (std::size_t i = 0; i < count; ++i) {
    const auto bits = std::bit_cast<std::uint32_t>(values[i]);
    for (int b = 0; b < 4; ++b) bytes[i * 4 + b] = static_cast<unsigned char>(bits >> (8 * b));
  }
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  std::size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const std::uint32_t v = bytes[i] << 16 | bytes[i + 1] << 8 | bytes[i + 2];
    for (int s = 18; s >= 0; s -= 6) out += kAlphabet[(v >> s) & 63];
  }
  if (const std::size_t rest = bytes.size() - i; rest > 0) {
    const std::uint32_t v = bytes[i] << 16 | (rest == 2 ? bytes[i + 1] << 8 : 0);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += rest == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

EmbeddingRoutes::EmbeddingRoutes(const BertEncoder& encoder, EmbeddingScheduler& scheduler,
                                 std::string name, std::int64_t max_input_tokens)
    : encoder_(encoder),
      scheduler_(scheduler),
      name_(std::move(name)),
      max_input_tokens_(max_input_tokens) {}

std::vector<std::int32_t> EmbeddingRoutes::token_ids(const std::string& text, bool truncate,
                                                     const std::string& param) const {
  const WordPieceTokenizer& tokenizer = encoder_.tokenizer();
  std::vector<std::int32_t> ids = tokenizer.encode(text);
  // encode() stops at the model's max_length; only then is the whole count worth computing.
  std::int64_t count = static_cast<std::int64_t>(ids.size());
  if (count == tokenizer.options().max_length)
    count = static_cast<std::int64_t>(tokenizer.tokenize(text).size()) + 2;
  if (count > max_input_tokens_) {
    if (!truncate)
      throw ApiError(400,
                     param + ": expected at most " + std::to_string(max_input_tokens_) +
                         " tokens (--max-input-tokens), got " + std::to_string(count) +
                         (param.starts_with("inputs") ? "; send \"truncate\": true to cut it" : ""),
                     "invalid_request_error", param, "context_length_exceeded");
    ids.resize(static_cast<std::size_t>(max_input_tokens_));
    ids.back() = tokenizer.sep_id();
  }
  return ids;
}

std::vector<std::vector<std::int32_t>> EmbeddingRoutes::token_ids(
    const std::vector<std::string>& inputs, bool truncate, const std::string& field) const {
  std::vector<std::vector<std::int32_t>> ids;
  ids.reserve(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i)
    ids.push_back(token_ids(inputs[i], truncate,
                            inputs.size() == 1 ? field : field + "[" + std::to_string(i) + "]"));
  return ids;
}

std::string EmbeddingRoutes::openai_embeddings(const std::string& body,
                                               Clock::time_point deadline) const {
  const EmbeddingsRequest request = parse_embeddings_request(body);
  if (request.model != name_)
    throw ApiError(
        404, "model: no model named \"" + request.model + "\"; this server has \"" + name_ + "\"",
        "invalid_request_error", "model", "model_not_found");
  const std::int64_t d = encoder_.dim();
  if (request.dimensions != 0 && request.dimensions != d)
    throw invalid_field("dimensions", std::to_string(d) + " (the model's width) or nothing",
                        std::to_string(request.dimensions));
  EmbedJob job{
      .ids = token_ids(request.inputs, false, "input"), .normalize = true, .deadline = deadline};
  std::int64_t tokens = 0;
  for (const auto& ids : job.ids) tokens += static_cast<std::int64_t>(ids.size());
  const std::vector<float> rows = scheduler_.run(std::move(job));

  std::string out = "{\"object\":\"list\",\"data\":[";
  for (std::size_t i = 0; i < request.inputs.size(); ++i) {
    if (i) out += ',';
    out += "{\"object\":\"embedding\",\"index\":" + std::to_string(i) + ",\"embedding\":";
    const float* row = rows.data() + i * static_cast<std::size_t>(d);
    if (request.base64) {
      out += '"';
      out += base64_float32(row, static_cast<std::size_t>(d));
      out += '"';
    } else {
      append_float_list(out, row, d);
    }
    out += '}';
  }
  out += "],\"model\":" + json_string(name_) +
         ",\"usage\":{\"prompt_tokens\":" + std::to_string(tokens) +
         ",\"total_tokens\":" + std::to_string(tokens) + "}}";
  return out;
}

std::string EmbeddingRoutes::tei_embed(const std::string& body, Clock::time_point deadline) const {
  const TeiEmbedRequest request = parse_tei_embed_request(body);
  const std::int64_t d = encoder_.dim();
  const std::size_t count = request.inputs.size();
  const std::vector<float> rows =
      scheduler_.run({.ids = token_ids(request.inputs, request.truncate, "inputs"),
                      .normalize = request.normalize,
                      .deadline = deadline});
  std::string out = "[";
  for (std::size_t i = 0; i < count; ++i) {
    if (i) out += ',';
    append_float_list(out, rows.data() + i * static_cast<std::size_t>(d), d);
  }
  out += ']';
  return out;
}

std::string EmbeddingRoutes::tokenize(const std::string& body) const {
  const TokenizeRequest request = parse_tokenize_request(body);
  const WordPieceTokenizer& tokenizer = encoder_.tokenizer();
  std::string out = "[";
  for (std::size_t i = 0; i < request.inputs.size(); ++i) {
    // The ids embed would use (truncated at the model's max_length, as `headcount embed` does).
    const std::vector<std::int32_t> ids = tokenizer.encode(request.inputs[i]);
    const std::size_t first = request.add_special_tokens ? 0 : 1;
    const std::size_t end = request.add_special_tokens ? ids.size() : ids.size() - 1;
    if (i) out += ',';
    out += '[';
    for (std::size_t t = first; t < end; ++t) {
      if (t != first) out += ',';
      const bool special = ids[t] == tokenizer.cls_id() || ids[t] == tokenizer.sep_id();
      out += "{\"id\":" + std::to_string(ids[t]) +
             ",\"text\":" + json_string(tokenizer.token(ids[t])) +
             ",\"special\":" + (special ? "true" : "false") + "}";
    }
    out += ']';
  }
  out += ']';
  return out;
}

std::string EmbeddingRoutes::models() const {
  return "{\"object\":\"list\",\"data\":[{\"id\":" + json_string(name_) +
         ",\"object\":\"model\",\"created\":0,\"owned_by\":\"headcount\"}]}";
}

}  // namespace headcount::serve
