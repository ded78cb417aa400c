#include "completion_routes.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <nlohmann/json.hpp>

#include "api_error.h"

namespace headcount::serve {
namespace {

using json = nlohmann::ordered_json;

std::string dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

// A log-probability as JSON: a number, or null for -inf (a token the model gives probability 0).
json logprob_value(float logprob) {
  return std::isfinite(logprob) ? json(static_cast<double>(logprob)) : json(nullptr);
}

json bytes_of(const std::string& text) {
  json bytes = json::array();
  for (const char c : text) bytes.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return bytes;
}

}  // namespace

std::string completion_text(const BpeTokenizer& tokenizer, std::int32_t id) {
  return tokenizer.token_type(id) == TokenType::control ? std::string() : tokenizer.token_bytes(id);
}

// ---- Completion -----------------------------------------------------------------------------

Completion::Completion(const BpeTokenizer& tokenizer, CompletionRequest request,
                       std::vector<std::int32_t> prompt, std::shared_ptr<DecodeStream> stream,
                       std::string id, std::string model)
    : tokenizer_(tokenizer),
      request_(std::move(request)),
      prompt_(std::move(prompt)),
      stream_(std::move(stream)),
      id_(std::move(id)),
      model_(std::move(model)),
      created_(std::time(nullptr)),
      text_(request_.stop) {}

Completion::~Completion() {
  if (!ended_) stream_->cancel();
}

void Completion::cancel() { stream_->cancel(); }

std::string Completion::token_text(std::int32_t id) const { return tokenizer_.token_bytes(id); }

bool Completion::consume(DecodeStream::Update update) {
  for (TokenLogprob& t : update.tokens) {
    if (text_.stopped()) break;  // tokens decoded before the scheduler saw the cancel
    tokens_.push_back(std::move(t));
    if (text_.append(completion_text(tokenizer_, tokens_.back().token))) {
      stream_->cancel();  // frees the slot at the next step
      finish_reason_ = "stop";
      ended_ = true;
      return true;
    }
  }
  if (update.done) {
    ended_ = true;
    finish_reason_ = update.finish_reason;
    error_status_ = update.error_status;
    error_message_ = update.error_message;
  }
  return ended_;
}

std::string Completion::usage_json() const {
  const auto n = static_cast<std::int64_t>(prompt_.size());
  const auto k = static_cast<std::int64_t>(tokens_.size());
  return dump(json{{"prompt_tokens", n}, {"completion_tokens", k}, {"total_tokens", n + k}});
}

std::string Completion::logprobs_json(std::size_t first_token, bool with_prompt) const {
  if (request_.top_logprobs < 0) return "null";
  auto top_of = [&](const TokenLogprob& t) {
    json top = json::object();
    for (const auto& [id, lp] : t.top) top[token_text(id)] = logprob_value(lp);
    return top;
  };
  if (request_.chat) {
    json content = json::array();
    for (std::size_t i = first_token; i < tokens_.size(); ++i) {
      const TokenLogprob& t = tokens_[i];
      json top = json::array();
      for (const auto& [id, lp] : t.top)
        top.push_back({{"token", token_text(id)},
                       {"logprob", logprob_value(lp)},
                       {"bytes", bytes_of(token_text(id))}});
      content.push_back({{"token", token_text(t.token)},
                         {"logprob", logprob_value(t.logprob)},
                         {"bytes", bytes_of(token_text(t.token))},
                         {"top_logprobs", top}});
    }
    return dump(json{{"content", content}});
  }
  // Completions' legacy shape: parallel lists, text_offset in bytes of the returned text.
  json tokens = json::array(), token_logprobs = json::array(), tops = json::array(),
       offsets = json::array();
  std::int64_t offset = 0;
  if (with_prompt) {
    const std::vector<TokenLogprob>& scored = stream_->prompt_logprobs();
    for (std::size_t i = 0; i < prompt_.size(); ++i) {
      tokens.push_back(token_text(prompt_[i]));
      offsets.push_back(offset);
      offset += static_cast<std::int64_t>(completion_text(tokenizer_, prompt_[i]).size());
      if (i == 0 || i - 1 >= scored.size()) {  // the first token has no context to score it
        token_logprobs.push_back(nullptr);
        tops.push_back(nullptr);
      } else {
        token_logprobs.push_back(logprob_value(scored[i - 1].logprob));
        tops.push_back(top_of(scored[i - 1]));
      }
    }
  }
  for (std::size_t i = first_token; i < tokens_.size(); ++i) {
    tokens.push_back(token_text(tokens_[i].token));
    token_logprobs.push_back(logprob_value(tokens_[i].logprob));
    tops.push_back(top_of(tokens_[i]));
    offsets.push_back(offset);
    offset += static_cast<std::int64_t>(completion_text(tokenizer_, tokens_[i].token).size());
  }
  return dump(json{{"tokens", tokens},
                   {"token_logprobs", token_logprobs},
                   {"top_logprobs", tops},
                   {"text_offset", offsets}});
}

std::string Completion::wait_for_body() {
  while (!consume(stream_->next(std::chrono::milliseconds(1000)))) {
  }
  if (error_status_ != 0)
    throw ApiError(error_status_, error_message_, "server_error", "",
                   error_status_ == 504 ? "timeout" : "");
  std::string text = text_.take(/*finished=*/true);
  std::string head = "{\"id\":" + json_string(id_) + ",\"object\":\"" +
                     (request_.chat ? "chat.completion" : "text_completion") +
                     "\",\"created\":" + std::to_string(created_) +
                     ",\"model\":" + json_string(model_) + ",\"choices\":[{\"index\":0,";
  if (request_.chat) {
    head += "\"message\":{\"role\":\"assistant\",\"content\":" + json_string(text) + "},";
  } else {
    if (request_.echo) {
      std::string prompt_text;
      for (const std::int32_t id : prompt_) prompt_text += completion_text(tokenizer_, id);
      text = prompt_text + text;
    }
    head += "\"text\":" + json_string(text) + ",";
  }
  return head + "\"logprobs\":" + logprobs_json(0, request_.echo) +
         ",\"finish_reason\":" + json_string(finish_reason_) + "}],\"usage\":" + usage_json() + "}";
}

std::string Completion::chunk(const std::string& text, std::size_t first_token, bool with_role,
                              const std::string& finish_reason) const {
  std::string out = "data: {\"id\":" + json_string(id_) + ",\"object\":\"" +
                    (request_.chat ? "chat.completion.chunk" : "text_completion") +
                    "\",\"created\":" + std::to_string(created_) +
                    ",\"model\":" + json_string(model_) + ",\"choices\":[{\"index\":0,";
  if (request_.chat) {
    json delta = json::object();
    if (with_role) delta["role"] = "assistant";
    if (!text.empty() || with_role) delta["content"] = text;
    out += "\"delta\":" + dump(delta) + ",";
  } else {
    out += "\"text\":" + json_string(text) + ",";
  }
  const bool echo_prompt = !request_.chat && request_.echo && with_role;
  out += "\"logprobs\":" +
         (first_token < tokens_.size() || echo_prompt ? logprobs_json(first_token, echo_prompt)
                                                      : std::string("null")) +
         ",\"finish_reason\":" +
         (finish_reason.empty() ? std::string("null") : json_string(finish_reason)) + "}]";
  if (request_.include_usage) out += ",\"usage\":null";
  return out + "}\n\n";
}

std::string Completion::next_events(std::chrono::milliseconds wait, bool& ended) {
  const bool done = ended_ || consume(stream_->next(wait));
  std::string events;
  if (done && error_status_ != 0) {
    // Past the deadline after the stream began: a final error event, as OpenAI's stream ends.
    ended = true;
    return "data: " +
           ApiError(error_status_, error_message_, "server_error", "",
                    error_status_ == 504 ? "timeout" : "")
               .body() +
           "\n\n";
  }
  // Nothing is sent before the request runs: its first event carries its first token (and,
  // with echo, the prompt and its log-probabilities, which exist from then on).
  if (!started_ && tokens_.empty() && !done) return events;
  std::string text = text_.take(done);
  const bool first = !started_;
  if (first && !request_.chat && request_.echo) {
    std::string prompt_text;
    for (const std::int32_t id : prompt_) prompt_text += completion_text(tokenizer_, id);
    text = prompt_text + text;
  }
  // The first event goes out as soon as the request runs (the chat role), the others when
  // there is text or log-probabilities to send.
  if (first || !text.empty() || (request_.top_logprobs >= 0 && sent_tokens_ < tokens_.size())) {
    events += chunk(text, sent_tokens_, first, "");
    sent_tokens_ = tokens_.size();
    started_ = true;
  }
  if (done) {
    events += chunk("", tokens_.size(), false, finish_reason_);
    if (request_.include_usage)
      events += "data: {\"id\":" + json_string(id_) + ",\"object\":\"" +
                (request_.chat ? "chat.completion.chunk" : "text_completion") +
                "\",\"created\":" + std::to_string(created_) + ",\"model\":" + json_string(model_) +
                ",\"choices\":[],\"usage\":" + usage_json() + "}\n\n";
    events += "data: [DONE]\n\n";
    ended = true;
  }
  return events;
}

// ---- CompletionRoutes -----------------------------------------------------------------------

CompletionRoutes::CompletionRoutes(const LlamaDecoder& decoder, DecoderScheduler& scheduler,
                                   std::string name, std::int64_t max_input_tokens, bool chat,
                                   std::string chat_system)
    : decoder_(decoder),
      scheduler_(scheduler),
      name_(std::move(name)),
      max_input_tokens_(max_input_tokens),
      chat_(chat),
      chat_system_(std::move(chat_system)) {}

std::unique_ptr<Completion> CompletionRoutes::start(const std::string& body, bool chat,
                                                    Clock::time_point deadline) const {
  CompletionRequest request = parse_completion_request(body, chat);
  if (request.model != name_)
    throw ApiError(
        404, "model: no model named \"" + request.model + "\"; this server has \"" + name_ + "\"",
        "invalid_request_error", "model", "model_not_found");
  if (chat && !chat_)
    throw ApiError(400,
                   "model: \"" + name_ +
                       "\" has no ChatML chat template (tokenizer.chat_template); use "
                       "/v1/completions",
                   "invalid_request_error", "model", "no_chat_template");
  const BpeTokenizer& tokenizer = decoder_.tokenizer();
  const std::int64_t context = decoder_.config().context;
  const std::string field = chat ? "messages" : "prompt";
  std::vector<std::int32_t> prompt;
  if (chat) {
    std::vector<ChatMessage> messages;
    for (const ChatTurn& m : request.messages)
      messages.push_back({.role = m.role, .content = m.content});
    prompt = tokenizer.encode(format_chatml(messages, {.default_system = chat_system_}));
  } else if (!request.token_ids.empty()) {
    prompt = request.token_ids;
    for (std::size_t i = 0; i < prompt.size(); ++i)
      if (prompt[i] >= tokenizer.vocab_size())
        throw invalid_field("prompt[" + std::to_string(i) + "]",
                            "a token id below " + std::to_string(tokenizer.vocab_size()),
                            std::to_string(prompt[i]));
  } else {
    prompt = tokenizer.encode(request.prompt);
  }
  const auto n = static_cast<std::int64_t>(prompt.size());
  if (n == 0) throw invalid_field(field, "text that makes at least one token", "none");
  if (n > max_input_tokens_)
    throw ApiError(400,
                   field + ": expected at most " + std::to_string(max_input_tokens_) +
                       " tokens (--max-input-tokens), got " + std::to_string(n),
                   "invalid_request_error", field, "context_length_exceeded");
  if (request.max_tokens < 0)  // not given: completions 16 (OpenAI's), chat to the context
    request.max_tokens = chat ? context - n : std::min<std::int64_t>(16, context - n);
  if (n + request.max_tokens > context)
    throw ApiError(400,
                   "max_tokens: expected at most " + std::to_string(context - n) +
                       " (the model's context of " + std::to_string(context) + " minus the " +
                       std::to_string(n) + " prompt tokens), got " +
                       std::to_string(request.max_tokens),
                   "invalid_request_error", "max_tokens", "context_length_exceeded");
  DecodeJob job{.prompt = prompt,
                .max_tokens = request.max_tokens,
                .temperature = request.temperature,
                .top_p = request.top_p,
                .seed = request.seed,
                .stop_at_eos = !request.ignore_eos,
                .top_logprobs = request.top_logprobs,
                .prompt_logprobs = request.echo && request.top_logprobs >= 0,
                .deadline = deadline};
  static std::atomic<std::uint64_t> counter{0};
  const std::string id = (chat ? "chatcmpl-" : "cmpl-") + std::to_string(++counter);
  std::shared_ptr<DecodeStream> stream = scheduler_.submit(std::move(job));
  return std::make_unique<Completion>(tokenizer, std::move(request), std::move(prompt),
                                      std::move(stream), id, name_);
}

std::string CompletionRoutes::tokenize(const std::string& body) const {
  const DecoderTokenizeRequest request = parse_decoder_tokenize_request(body);
  const BpeTokenizer& tokenizer = decoder_.tokenizer();
  const std::vector<std::int32_t> ids =
      tokenizer.encode(request.content, {.parse_special = request.parse_special});
  json tokens = json::array();
  for (const std::int32_t id : ids)
    if (request.with_pieces)
      tokens.push_back({{"id", id}, {"piece", tokenizer.token_bytes(id)}});
    else
      tokens.push_back(id);
  return dump(json{{"tokens", tokens}});
}

std::string CompletionRoutes::detokenize(const std::string& body) const {
  const std::vector<std::int64_t> ids = parse_detokenize_request(body);
  const BpeTokenizer& tokenizer = decoder_.tokenizer();
  std::string text;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= tokenizer.vocab_size())
      throw invalid_field("tokens[" + std::to_string(i) + "]",
                          "a token id, 0 to " + std::to_string(tokenizer.vocab_size() - 1),
                          std::to_string(ids[i]));
    text += tokenizer.token_bytes(static_cast<std::int32_t>(ids[i]));
  }
  return dump(json{{"content", text}});
}

}  // namespace headcount::serve
