// The error a `headcount serve` route answers with: an HTTP status and OpenAI's error object,
//   {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
// `param` names the request field at fault (null when no field is), so a client sees which
// part of its request to fix, as the CLI's one-line errors name the option.
#pragma once

#include <stdexcept>
#include <string>

namespace headcount::serve {

class ApiError : public std::runtime_error {
 public:
  // type: OpenAI's category ("invalid_request_error", "authentication_error", ...); param: the
  // field ("" for none, written as null); code: a short machine-readable reason ("" for null).
  ApiError(int status, std::string message, std::string type, std::string param = "",
           std::string code = "")
      : std::runtime_error(message),
        status_(status),
        type_(std::move(type)),
        param_(std::move(param)),
        code_(std::move(code)) {}

  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }

  // The JSON body (one line).
  std::string body() const;

 private:
  int status_;
  std::string type_, param_, code_;
};

// 400 for a request field: "<param>: expected <expected>, got <got>", as headcount's Error says it.
ApiError invalid_field(const std::string& param, const std::string& expected,
                       const std::string& got);

// A JSON string of `text`, invalid UTF-8 replaced by U+FFFD (a model's tokens are bytes).
std::string json_string(const std::string& text);

}  // namespace headcount::serve
