// `headcount serve`: the HTTP/1.1 server (cpp-httplib, Debian's libcpp-httplib-dev) in front of
// an encoder (embeddings), a decoder (completions, chat), or both. Its order of events:
//   1. bind host:port (a failure is an Error naming --host/--port: one line, exit 2);
//   2. answer at once, while a loader thread loads the models: GET /health is 503 until they
//      are ready and 200 after, and the models' routes are 503 meanwhile;
//   3. SIGTERM or SIGINT: stop accepting, finish the requests in flight (the scheduler keeps
//      running until the last HTTP thread is done), then return (the command exits 0).
// Every response of the API is JSON; every error is OpenAI's error object (api_error.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "headcount/kv_cache.h"

namespace headcount::serve {

struct ServeOptions {
  std::string model_dir;     // the encoder's directory (checked before run_server); "": none
  std::string model_name;    // its id in the API (the directory's name)
  std::string decoder_path;  // the decoder's GGUF file (checked before run_server); "": none
  std::string decoder_name;  // its id in the API (the file's name without .gguf)
  std::string decoder_weights = "auto";  // as generate's --weights
  CacheDType kv_dtype = CacheDType::f32;
  int parallel = 4;                 // completion requests decoding at once
  std::int64_t prefill_chunk = 32;  // prompt tokens prefilled between two decode steps
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (the line on stderr says which)
  int threads = 1;  // the encoder's worker pool
  std::size_t max_connections = 128;
  std::string api_key;      // "" = no key
  std::string cors_origin;  // "" = no CORS headers
  std::size_t max_body_bytes = 0;
  std::int64_t max_input_tokens = 0;  // 0: the encoder's max_length, the decoder's context - 1
  std::size_t max_queue = 0;
  std::int64_t max_batch_tokens = 0;
  double timeout_seconds = 0;
};

// Runs until SIGTERM/SIGINT; throws Error for a bad option found only now (bind, model load).
void run_server(const ServeOptions& options);

// Whether two strings are equal, in a time that depends on the length of `secret` only (not on
// where the first difference is), so an API key cannot be guessed byte by byte from timings.
bool constant_time_equals(const std::string& given, const std::string& secret);

}  // namespace headcount::serve
