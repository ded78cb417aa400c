// The encoder's routes of `headcount serve`, apart from HTTP: a request body in, a response body
// out, or an ApiError. This runs on the HTTP threads and does only what is cheap and must come
// before queueing: parse, check the model name, tokenize (the token cap needs the counts), and
// format the answer; the forward passes run on the scheduler's thread.
//   POST /v1/embeddings  OpenAI's shape; floats as JSON numbers or base64 (little-endian float32)
//   POST /embed          text-embeddings-inference's shape: a list of embeddings
//   POST /tokenize       text-embeddings-inference's shape: per input, [{id, text, special}]
//   GET  /v1/models      the one served model
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "headcount/encoder.h"
#include "scheduler.h"

namespace headcount::serve {

class EmbeddingRoutes {
 public:
  // `name`: the model's id in requests and in /v1/models. `max_input_tokens`: the most tokens
  // ([CLS] and [SEP] included) one input may have, 2 to the tokenizer's max_length.
  EmbeddingRoutes(const BertEncoder& encoder, EmbeddingScheduler& scheduler, std::string name,
                  std::int64_t max_input_tokens);

  std::string openai_embeddings(const std::string& body, Clock::time_point deadline) const;
  std::string tei_embed(const std::string& body, Clock::time_point deadline) const;
  std::string tokenize(const std::string& body) const;
  std::string models() const;
  const std::string& name() const { return name_; }

 private:
  // [CLS] ... [SEP] of `text`; more than max_input_tokens is a 400 naming `param`, or, with
  // `truncate`, the first max_input_tokens - 1 ids and [SEP] (the tokenizer's own truncation).
  std::vector<std::int32_t> token_ids(const std::string& text, bool truncate,
                                      const std::string& param) const;
  std::vector<std::vector<std::int32_t>> token_ids(const std::vector<std::string>& inputs,
                                                   bool truncate, const std::string& field) const;

  const BertEncoder& encoder_;
  EmbeddingScheduler& scheduler_;
  std::string name_;
  std::int64_t max_input_tokens_;
};

// The bytes of `count` float32 values, little-endian, in standard base64 (what OpenAI's clients
// decode for encoding_format "base64").
std::string base64_float32(const float* values, std::size_t count);

}  // namespace headcount::serve
