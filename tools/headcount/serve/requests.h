// Request bodies of `headcount serve`, parsed and checked before anything is queued: JSON in,
// a plain struct out, or an ApiError (400) naming the field. No model is needed here (the token
// counts are checked by the routes, which hold the tokenizer), so the fuzz target
// (fuzz/fuzz_serve_request.cpp) runs these functions alone.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "api_error.h"

namespace headcount::serve {

// Inputs one request may carry (OpenAI's limit for /v1/embeddings).
inline constexpr std::size_t kMaxInputsPerRequest = 2048;

// POST /v1/embeddings (OpenAI): {"input": "text" | ["text", ...], "model": "name",
// "encoding_format": "float" | "base64", "dimensions": n, "user": ...}. Token arrays as input
// are refused (400 naming "input"); "dimensions" must be the model's width when given.
struct EmbeddingsRequest {
  std::vector<std::string> inputs;
  std::string model;
  bool base64 = false;
  long long dimensions = 0;  // 0: not given
};
EmbeddingsRequest parse_embeddings_request(std::string_view body);

// POST /embed (text-embeddings-inference): {"inputs": "text" | [...], "truncate": bool,
// "normalize": bool}; the answer is always a list of embeddings.
struct TeiEmbedRequest {
  std::vector<std::string> inputs;
  bool truncate = false;
  bool normalize = true;
};
TeiEmbedRequest parse_tei_embed_request(std::string_view body);

// POST /tokenize (text-embeddings-inference's shape): {"inputs": "text" | [...],
// "add_special_tokens": bool}.
struct TokenizeRequest {
  std::vector<std::string> inputs;
  bool add_special_tokens = true;
};
TokenizeRequest parse_tokenize_request(std::string_view body);

}  // namespace headcount::serve
