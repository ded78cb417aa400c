// Fuzz target: `headcount serve`'s request bodies, parsed and checked by the functions its routes
// call (tools/headcount/serve/requests.h) before anything is queued. Input: one body, given to
// every parser (POST /v1/embeddings, /embed, /tokenize in both shapes, /detokenize,
// /v1/completions, /v1/chat/completions). Outcomes: a request within its documented ranges, or an
// ApiError that is a 400 whose body is OpenAI's error object (valid JSON, naming the field
// whenever the body was JSON). Anything else, an exception of another type included, is a bug.
// A completion request's stop strings then cut the body itself, streamed in pieces
// (serve/text_stream.h): the pieces, joined, must be the text cut at once.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "fuzz_input.h"
#include "serve/requests.h"
#include "serve/text_stream.h"

namespace {

using headcount::serve::ApiError;

void check_error(const ApiError& e) {
  FUZZ_ASSERT(e.status() == 400);
  const nlohmann::json body = nlohmann::json::parse(e.body(), nullptr, false);
  FUZZ_ASSERT(body.is_object() && body.contains("error"));
  const nlohmann::json& error = body["error"];
  FUZZ_ASSERT(error["message"].is_string() && error["type"] == "invalid_request_error");
  // Only a body that is not JSON at all names no field.
  FUZZ_ASSERT(error["param"].is_string() || error["code"] == "invalid_json");
}

template <typename Request>
void check_inputs(const Request& request) {
  FUZZ_ASSERT(!request.inputs.empty());
  FUZZ_ASSERT(request.inputs.size() <= headcount::serve::kMaxInputsPerRequest);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  try {
    const auto request = headcount::serve::parse_embeddings_request(body);
    check_inputs(request);
    FUZZ_ASSERT(request.dimensions >= 0);
  } catch (const ApiError& e) {
    check_error(e);
  }
  try {
    check_inputs(headcount::serve::parse_tei_embed_request(body));
  } catch (const ApiError& e) {
    check_error(e);
  }
  try {
    check_inputs(headcount::serve::parse_tokenize_request(body));
  } catch (const ApiError& e) {
    check_error(e);
  }
  try {
    (void)headcount::serve::parse_detokenize_request(body);
  } catch (const ApiError& e) {
    check_error(e);
  }
  try {
    (void)headcount::serve::is_decoder_tokenize_request(body);
    (void)headcount::serve::parse_decoder_tokenize_request(body);
  } catch (const ApiError& e) {
    check_error(e);
  }
  for (const bool chat : {false, true}) {
    try {
      const auto r = headcount::serve::parse_completion_request(body, chat);
      FUZZ_ASSERT(r.chat == chat && r.stop.size() <= 4);
      FUZZ_ASSERT(r.temperature >= 0 && r.temperature <= 2 && r.top_p > 0 && r.top_p <= 1);
      FUZZ_ASSERT(chat ? !r.messages.empty() && r.top_logprobs <= 20 : r.top_logprobs <= 5);
      FUZZ_ASSERT(r.max_tokens == -1 || r.max_tokens >= (r.echo ? 0 : 1));
      FUZZ_ASSERT(!r.include_usage || r.stream);
      // The stop strings on the body's bytes, fed in pieces of 1 to 7 bytes as tokens come:
      // what a stream shows, joined, is the text of the same pieces read at the end (no byte
      // shown is taken back by a later stop), a prefix of the body with no stop string in it.
      headcount::serve::TextStream shown(r.stop), at_end(r.stop);
      std::string streamed;
      for (std::size_t at = 0, k = 1; at < body.size() && !shown.stopped();
           at += k, k = k % 7 + 1) {
        shown.append(body.substr(at, k));
        at_end.append(body.substr(at, k));
        streamed += shown.take(false);
      }
      streamed += shown.take(true);
      FUZZ_ASSERT(streamed == shown.text() && streamed == at_end.take(true));
      FUZZ_ASSERT(body.substr(0, streamed.size()) == streamed);
      for (const std::string& stop : r.stop) FUZZ_ASSERT(streamed.find(stop) == std::string::npos);
    } catch (const ApiError& e) {
      check_error(e);
    }
  }
  return 0;
}
