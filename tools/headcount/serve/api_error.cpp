#include "api_error.h"

#include <nlohmann/json.hpp>

namespace headcount::serve {

std::string ApiError::body() const {
  using json = nlohmann::ordered_json;
  json error = {{"message", what()},
                {"type", type_},
                {"param", param_.empty() ? json(nullptr) : json(param_)},
                {"code", code_.empty() ? json(nullptr) : json(code_)}};
  // A message may quote the client's bytes: invalid UTF-8 becomes U+FFFD, so the body is JSON.
  return json{{"error", error}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

ApiError invalid_field(const std::string& param, const std::string& expected,
                       const std::string& got) {
  return ApiError(400, param + ": expected " + expected + ", got " + got, "invalid_request_error",
                  param, "invalid_value");
}

std::string json_string(const std::string& text) {
  return nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace headcount::serve
