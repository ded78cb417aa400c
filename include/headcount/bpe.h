// Byte-level BPE (the GPT-2 family), as SmolLM2's tokenizer runs in Hugging Face `tokenizers`
// and in llama.cpp (pre-tokenizer "smollm"), with its vocabulary, merges and special tokens read
// from a GGUF file:
//
//   1. Special tokens: the text is cut at every occurrence of a special token's text (token
//      types CONTROL and USER_DEFINED: SmolLM2's 17, <|endoftext|>, <|im_start|>, <|im_end|>...),
//      leftmost first, the longest where several start at one place; each becomes its id.
//      With parse_special off the text is all ordinary text.
//   2. Decode the rest as UTF-8. Invalid bytes never throw: each maximal ill-formed subpart
//      becomes one U+FFFD, as Python's bytes.decode("utf-8", "replace") does (so the ids are
//      those of the reference tokenizer on that string).
//   3. Pre-tokenize ("smollm"): every numeric character (Unicode N*: Nd, Nl, No) is a piece of
//      its own; each stretch between them is split by the GPT-2 pattern
//        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//      (\s: Unicode White_Space; \p{L}: L*; no normalisation, no lower-casing).
//   4. Byte level: each piece's UTF-8 bytes become GPT-2's printable stand-ins (bytes 33-126,
//      161-172 and 174-255 stand for themselves as code points; the other 68 bytes for
//      U+0100..U+0143 in byte order: the space is "Ġ", U+0120).
//   5. BPE: start from one symbol per byte; repeatedly merge the adjacent pair whose merge comes
//      first in the merge list (the leftmost of equal pairs), until no pair has a merge; each
//      final symbol is a vocabulary token. A byte whose stand-in is not a token is dropped, as
//      the `tokenizers` crate drops it without an unknown token: SmolLM2 has none for 21 bytes
//      (the control characters 4, 6, 19, 20, 22, 29; F1 and F2, which lead only code points of
//      unassigned planes; and C0, C1, F5-FF, which UTF-8 never uses).
//
// decode() inverts step 4, as the `tokenizers` ByteLevel decoder does: each token whose
// characters are all stand-ins maps back to their bytes, any other token is its text as is
// (special tokens are ASCII, which stands for itself). The result is bytes: a
// multi-byte character may be split across tokens, so a caller streaming tokens appends bytes.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace headcount {

class GgufFile;

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class TokenType : std::int32_t {
  undefined = 0,
  normal = 1,
  unknown = 2,
  control = 3,
  user_defined = 4,
  unused = 5,
  byte = 6,
};

struct BpeVocabulary {
  std::vector<std::string> tokens;        // id -> token text (stand-ins for bytes)
  std::vector<TokenType> token_types;     // one per token (normal when empty)
  std::vector<std::string> merges;        // "left right", in priority order
  std::string pre = "smollm";             // the pre-tokenizer; only "smollm" is implemented
  std::int32_t bos_id = -1, eos_id = -1;  // -1: none
};

struct BpeEncodeOptions {
  bool parse_special = true;  // step 1: special-token texts become their ids
};

class BpeTokenizer {
 public:
  // Throws Error naming the entry when a merge is malformed or names a token outside the
  // vocabulary, token types and tokens differ in number, an id is out of range, or the
  // pre-tokenizer is not "smollm".
  explicit BpeTokenizer(BpeVocabulary vocabulary);
  ~BpeTokenizer();
  BpeTokenizer(BpeTokenizer&&) noexcept;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept;

  // tokenizer.ggml.{model = "gpt2", pre, tokens, token_type, merges, bos_token_id, eos_token_id}.
  static BpeTokenizer from_gguf(const GgufFile& file);

  std::int64_t vocab_size() const;
  // What it was built from (a copy makes an equal tokenizer: the type is move-only).
  const BpeVocabulary& vocabulary() const;
  const std::string& token(std::int32_t id) const;  // throws Error for an id out of range
  TokenType token_type(std::int32_t id) const;
  std::int32_t bos_id() const;
  std::int32_t eos_id() const;
  // The id of a token's exact text, or -1.
  std::int32_t find(std::string_view token) const;

  std::vector<std::int32_t> encode(std::string_view text, BpeEncodeOptions options = {}) const;
  // The bytes the ids stand for; throws Error naming an id out of range.
  std::string decode(const std::vector<std::int32_t>& ids) const;
  // The bytes one token stands for.
  const std::string& token_bytes(std::int32_t id) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// One turn of a conversation.
struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

struct ChatMlOptions {
  // Put before the conversation, as a system turn, when its first message is not one; empty:
  // none. SmolLM2's template uses kSmolLM2SystemPrompt.
  std::string default_system;
  bool add_generation_prompt = true;  // end with "<|im_start|>assistant\n"
};

inline constexpr std::string_view kSmolLM2SystemPrompt =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

// ChatML: "<|im_start|>" role "\n" content "<|im_end|>\n" per message, as SmolLM2's
// tokenizer.chat_template renders it (encode the result with parse_special on).
std::string format_chatml(const std::vector<ChatMessage>& messages, const ChatMlOptions& options);

}  // namespace headcount
