// The decoder's routes of `headcount serve`, apart from HTTP:
//   POST /v1/completions       OpenAI's text completions: echo, logprobs (0-5), stop, stream
//   POST /v1/chat/completions  OpenAI's chat: the messages in ChatML, as `generate --chat` renders
//                              a user turn (SmolLM2's default system turn first), logprobs,
//                              top_logprobs, stop, stream (server-sent events)
//   POST /tokenize             with {"content": ...}: llama.cpp's shape, the decoder's BPE ids
//   POST /detokenize           {"tokens": [...]} -> {"content": text}
// A request is parsed, tokenized and checked on its HTTP thread (every fault a 400 naming the
// field), then queued on the DecoderScheduler; its Completion turns the scheduler's tokens into
// the answer: text cut at the first stop string (TextStream), log-probabilities, usage counts.
#pragma once

#include <chrono>
#include <cstdint>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "decoder_scheduler.h"
#include "headcount/bpe.h"
#include "headcount/decoder.h"
#include "requests.h"
#include "text_stream.h"

namespace headcount::serve {

// One request in flight, read by its HTTP thread.
class Completion {
 public:
  Completion(const BpeTokenizer& tokenizer, CompletionRequest request,
             std::vector<std::int32_t> prompt, std::shared_ptr<DecodeStream> stream, std::string id,
             std::string model);
  ~Completion();  // cancels the request if it has not ended (the client left)

  bool streaming() const { return request_.stream; }
  // Not streaming: waits for the end; the response body, or ApiError (504 past the deadline).
  std::string wait_for_body();
  // Streaming: the server-sent events that are ready within `wait` ("" if none yet); `ended`
  // is set with the last ones ("data: [DONE]", or an error event past the deadline).
  std::string next_events(std::chrono::milliseconds wait, bool& ended);
  void cancel();

 private:
  // Takes the scheduler's news: each token's text into the TextStream (a stop string cancels
  // the rest), its log-probability kept; returns true when the completion has ended.
  bool consume(DecodeStream::Update update);
  std::string chunk(const std::string& text, std::size_t first_token, bool with_role,
                    const std::string& finish_reason) const;
  std::string logprobs_json(std::size_t first_token, bool with_prompt) const;
  std::string token_text(std::int32_t id) const;
  std::string usage_json() const;

  const BpeTokenizer& tokenizer_;
  CompletionRequest request_;
  std::vector<std::int32_t> prompt_;
  std::shared_ptr<DecodeStream> stream_;
  std::string id_, model_;
  std::time_t created_;
  TextStream text_;
  std::vector<TokenLogprob> tokens_;  // the completion's tokens (up to the one a stop ends)
  std::size_t sent_tokens_ = 0;       // streaming: tokens whose logprobs were sent
  bool started_ = false, ended_ = false;
  std::string finish_reason_;
  int error_status_ = 0;
  std::string error_message_;
};

class CompletionRoutes {
 public:
  // `name`: the model's id; `max_input_tokens`: the most prompt tokens one request may have
  // (<= the model's context - 1). `chat_system`: the system turn put first when a chat has
  // none (SmolLM2's template's default; "" for none); `chat`: whether the file has a chat
  // template (ChatML: run_server refuses any other at start); without, chat answers 400.
  CompletionRoutes(const LlamaDecoder& decoder, DecoderScheduler& scheduler, std::string name,
                   std::int64_t max_input_tokens, bool chat, std::string chat_system);

  std::unique_ptr<Completion> start(const std::string& body, bool chat,
                                    Clock::time_point deadline) const;
  std::string tokenize(const std::string& body) const;
  std::string detokenize(const std::string& body) const;
  const std::string& name() const { return name_; }

 private:
  const LlamaDecoder& decoder_;
  DecoderScheduler& scheduler_;
  std::string name_;
  std::int64_t max_input_tokens_;
  bool chat_;
  std::string chat_system_;
};

// The text a token adds to a completion: its bytes, or nothing for a control token (EOS,
// <|im_start|>...), as `headcount generate` prints them.
std::string completion_text(const BpeTokenizer& tokenizer, std::int32_t id);

}  // namespace headcount::serve
