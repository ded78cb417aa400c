// Request bodies of `headcount serve`, parsed and checked before anything is queued: JSON in,
// a plain struct out, or an ApiError (400) naming the field. No model is needed here (the token
// counts are checked by the routes, which hold the tokenizer), so the fuzz target
// (fuzz/fuzz_serve_request.cpp) runs these functions alone.
#pragma once

#include <cstddef>
#include <cstdint>
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

// POST /v1/completions and POST /v1/chat/completions (OpenAI), as far as one decoder serves them:
//   completions: {"prompt": "text" | ["text"] | [token ids], "echo": bool, "logprobs": 0-5, ...}
//   chat:        {"messages": [{"role": "system"|"user"|"assistant", "content": "text" |
//                 [{"type": "text", "text": "..."}]}], "logprobs": bool, "top_logprobs": 0-20, ...}
//   both:        "model", "max_tokens" (chat: or "max_completion_tokens"), "temperature" (default
//                1, as OpenAI's), "top_p", "seed" (default 0, as generate's: the same request
//                gives the same completion), "stop" (a string or up to 4), "stream",
//                "stream_options": {"include_usage": bool}, "n" (1 only), "user", and
//                llama.cpp's "ignore_eos" (as generate --ignore-eos).
// Fields OpenAI has and this server does not implement (presence/frequency penalties,
// logit_bias, tools, response_format, n > 1) are refused with 400 naming them, rather than
// silently ignored: an answer that ignored them would not be the one the client asked for.
struct ChatTurn {
  std::string role, content;
};
struct CompletionRequest {
  bool chat = false;
  std::string model;
  std::string prompt;                   // completions: the prompt's text
  std::vector<std::int32_t> token_ids;  // completions: the prompt as token ids, when given so
  std::vector<ChatTurn> messages;       // chat
  std::int64_t max_tokens = -1;         // -1: not given (completions: 16; chat: to the context)
  float temperature = 1;
  float top_p = 1;
  std::uint64_t seed = 0;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;
  bool echo = false;        // completions: the prompt's text (and its logprobs) before the answer
  bool ignore_eos = false;  // llama.cpp's extension: run to max_tokens (benchmarks)
  int top_logprobs = -1;    // -1: no logprobs; else the alternatives per token (0-5 / 0-20)
};
CompletionRequest parse_completion_request(std::string_view body, bool chat);

// POST /detokenize (llama.cpp's shape): {"tokens": [ids]}. POST /tokenize with "content" (the
// decoder's, llama.cpp's shape): {"content": "text", "parse_special": bool (default true: special
// tokens' texts become their ids), "with_pieces": bool (each id with its text)}.
std::vector<std::int64_t> parse_detokenize_request(std::string_view body);
struct DecoderTokenizeRequest {
  std::string content;
  bool parse_special = true;
  bool with_pieces = false;
};
DecoderTokenizeRequest parse_decoder_tokenize_request(std::string_view body);
// Whether a /tokenize body is llama.cpp's shape ({"content": ...}) rather than TEI's
// ({"inputs": ...}); malformed JSON counts as TEI's (whose parser then names the fault).
bool is_decoder_tokenize_request(std::string_view body);

}  // namespace headcount::serve
