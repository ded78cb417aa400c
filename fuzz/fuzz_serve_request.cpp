// Fuzz target: `headcount serve`'s request bodies, parsed and checked by the functions its routes
// call (tools/headcount/serve/requests.h) before anything is queued. Input: one body, given to the
// three parsers (POST /v1/embeddings, /embed, /tokenize). Outcomes: a request whose inputs are 1 to
// kMaxInputsPerRequest strings, or an ApiError that is a 400 whose body is OpenAI's error object
// (valid JSON, naming the field whenever the body was JSON). Anything else, an exception of
// another type included, is a bug.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

#include "fuzz_input.h"
#include "serve/requests.h"

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
  return 0;
}
