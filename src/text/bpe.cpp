// Byte-level BPE, step by step as in include/headcount/bpe.h. The pre-tokenizer is the GPT-2
// pattern written out as a scanner over code points (one function per alternative, tried in the
// pattern's order), so no regex engine is involved; character classes come from utf8proc. The
// merge loop is the `tokenizers` crate's: a priority queue of adjacent pairs ordered by merge
// rank then position, symbols in a linked list, stale entries skipped when popped; O(n log n)
// in the piece length, so a megabyte of one letter stays fast.
#include "headcount/bpe.h"

#include <utf8proc.h>

#include <algorithm>
#include <array>
#include <queue>
#include <unordered_map>

#include "headcount/error.h"
#include "headcount/gguf.h"
#include "headcount/tokenizer.h"
#include "text/unicode_text.h"

namespace headcount {

using detail::concat;
using text::append_utf8;
using text::is_whitespace;

namespace {

utf8proc_category_t category(char32_t c) {
  return static_cast<utf8proc_category_t>(utf8proc_category(static_cast<utf8proc_int32_t>(c)));
}

bool is_letter(char32_t c) {
  const auto cat = category(c);
  return cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
}

bool is_number(char32_t c) {
  const auto cat = category(c);
  return cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO;
}

// GPT-2's bytes_to_unicode(): the printable bytes stand for themselves, the other 68 for
// U+0100 onwards in byte order.
std::array<char32_t, 256> byte_stand_ins() {
  std::array<char32_t, 256> map{};
  char32_t next = 0x100;
  for (int b = 0; b < 256; ++b) {
    const bool printable =
        (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    map[static_cast<std::size_t>(b)] = printable ? static_cast<char32_t>(b) : next++;
  }
  return map;
}

// Pieces of one stretch without numeric characters, by the GPT-2 pattern; [begin, end) offsets.
void split_gpt2(const std::u32string& s, std::size_t from, std::size_t to,
                std::vector<std::pair<std::size_t, std::size_t>>& pieces) {
  std::size_t i = from;
  const auto run = [&](std::size_t j, auto pred) {
    while (j < to && pred(s[j])) ++j;
    return j;
  };
  const auto is_other = [](char32_t c) {
    return !is_whitespace(c) && !is_letter(c) && !is_number(c);
  };
  while (i < to) {
    const char32_t c = s[i];
    std::size_t end = i;
    // 's|'t|'re|'ve|'m|'ll|'d
    if (c == U'\'' && i + 1 < to) {
      const char32_t a = s[i + 1];
      const char32_t b = i + 2 < to ? s[i + 2] : 0;
      if (a == U's' || a == U't' || a == U'm' || a == U'd')
        end = i + 2;
      else if ((a == U'r' && b == U'e') || (a == U'v' && b == U'e') || (a == U'l' && b == U'l'))
        end = i + 3;
    }
    if (end == i) {
      // An optional space, then a run of one class: ` ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+`.
      const std::size_t k = (c == U' ' && i + 1 < to) ? i + 1 : i;
      const char32_t d = s[k];
      if (is_letter(d))
        end = run(k, is_letter);
      else if (is_number(d))
        end = run(k, is_number);
      else if (is_other(d))
        end = run(k, is_other);
    }
    if (end == i) {
      // Whitespace: `\s+(?!\S)` leaves the last space of a run before a non-space to the next
      // piece; `\s+` takes a lone one.
      const std::size_t j = run(i, is_whitespace);
      end = (j < to && j - i >= 2) ? j - 1 : j;
    }
    pieces.emplace_back(i, end);
    i = end;
  }
}

struct PairHash {
  std::size_t operator()(std::uint64_t key) const {
    return std::hash<std::uint64_t>{}(key * 0x9E3779B97F4A7C15ull);
  }
};

std::uint64_t pair_key(std::int32_t left, std::int32_t right) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) |
         static_cast<std::uint32_t>(right);
}

}  // namespace

struct BpeTokenizer::Impl {
  BpeVocabulary v;
  std::unordered_map<std::string, std::int32_t> ids;  // token text -> first id with it
  struct Merge {
    std::int32_t rank, merged;
  };
  std::unordered_map<std::uint64_t, Merge, PairHash> merges;  // (left id, right id) -> merge
  std::array<std::int32_t, 256> byte_ids{};  // byte -> token of its stand-in, or -1
  std::vector<std::string> bytes_of;         // id -> the bytes it stands for
  std::vector<std::int32_t> special;         // ids cut out in step 1, longest first

  void bpe(const std::string& piece, std::vector<std::int32_t>& out) const;
  void encode_text(std::string_view text, std::vector<std::int32_t>& out) const;
};

BpeTokenizer::BpeTokenizer(BpeVocabulary vocabulary) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.v = std::move(vocabulary);
  BpeVocabulary& v = m.v;
  const auto n = static_cast<std::int64_t>(v.tokens.size());
  check(n >= 1 && n <= INT32_MAX, "tokenizer tokens", "1 to 2^31 - 1 tokens", n);
  check(v.pre == "smollm", "tokenizer pre-tokenizer", "smollm", v.pre);
  if (v.token_types.empty()) v.token_types.assign(v.tokens.size(), TokenType::normal);
  check(v.token_types.size() == v.tokens.size(), "tokenizer token_type",
        concat(n, " entries (one per token)"), v.token_types.size());
  check(v.bos_id >= -1 && v.bos_id < n, "tokenizer bos_token_id", concat("-1 or an id below ", n),
        v.bos_id);
  check(v.eos_id >= -1 && v.eos_id < n, "tokenizer eos_token_id", concat("-1 or an id below ", n),
        v.eos_id);

  m.ids.reserve(v.tokens.size());
  for (std::int32_t id = 0; id < n; ++id) m.ids.emplace(v.tokens[static_cast<std::size_t>(id)], id);

  const std::array<char32_t, 256> stand_in = byte_stand_ins();
  std::unordered_map<char32_t, unsigned char> byte_of;
  for (int b = 0; b < 256; ++b) {
    std::string s;
    append_utf8(s, stand_in[static_cast<std::size_t>(b)]);
    const auto it = m.ids.find(s);
    m.byte_ids[static_cast<std::size_t>(b)] = it == m.ids.end() ? -1 : it->second;
    byte_of[stand_in[static_cast<std::size_t>(b)]] = static_cast<unsigned char>(b);
  }

  for (std::size_t r = 0; r < v.merges.size(); ++r) {
    const std::string& merge = v.merges[r];
    const std::size_t space = merge.find(' ');
    check(space != std::string::npos && space > 0 && space + 1 < merge.size() &&
              merge.find(' ', space + 1) == std::string::npos,
          concat("tokenizer merges[", r, "]"), "\"left right\" (two tokens, one space)",
          concat("\"", merge, "\""));
    const std::string left = merge.substr(0, space), right = merge.substr(space + 1);
    const auto l = m.ids.find(left), rr = m.ids.find(right), merged = m.ids.find(left + right);
    check(l != m.ids.end() && rr != m.ids.end() && merged != m.ids.end(),
          concat("tokenizer merges[", r, "]"),
          "tokens of the vocabulary (both parts and their concatenation)",
          concat("\"", merge, "\""));
    // A pair listed twice keeps its first (better) rank, as the `tokenizers` crate does.
    m.merges.emplace(pair_key(l->second, rr->second),
                     Impl::Merge{static_cast<std::int32_t>(r), merged->second});
  }

  m.bytes_of.resize(v.tokens.size());
  for (std::size_t id = 0; id < v.tokens.size(); ++id) {
    const std::string& t = v.tokens[id];
    const TokenType type = v.token_types[id];
    if ((type == TokenType::control || type == TokenType::user_defined) && !t.empty())
      m.special.push_back(static_cast<std::int32_t>(id));
    // As the `tokenizers` ByteLevel decoder: every token, special or not, maps back through the
    // stand-ins when all its characters are stand-ins, and is its text as is otherwise.
    std::string bytes;
    bool mapped = true;
    for (char32_t c : decode_utf8_lossy(t)) {
      const auto it = byte_of.find(c);
      if (it == byte_of.end()) {
        mapped = false;
        break;
      }
      bytes.push_back(static_cast<char>(it->second));
    }
    m.bytes_of[id] = mapped ? bytes : t;
  }
  std::stable_sort(m.special.begin(), m.special.end(), [&](std::int32_t a, std::int32_t b) {
    return v.tokens[static_cast<std::size_t>(a)].size() >
           v.tokens[static_cast<std::size_t>(b)].size();
  });
}

BpeTokenizer::~BpeTokenizer() = default;
BpeTokenizer::BpeTokenizer(BpeTokenizer&&) noexcept = default;
BpeTokenizer& BpeTokenizer::operator=(BpeTokenizer&&) noexcept = default;

BpeTokenizer BpeTokenizer::from_gguf(const GgufFile& file) {
  const std::string model = file.get_string("tokenizer.ggml.model");
  check(model == "gpt2", file.path() + ": metadata 'tokenizer.ggml.model'", "gpt2 (byte-level BPE)",
        model);
  BpeVocabulary v;
  v.tokens = file.get_string_array("tokenizer.ggml.tokens");
  v.merges = file.get_string_array("tokenizer.ggml.merges");
  v.pre = file.find("tokenizer.ggml.pre") ? file.get_string("tokenizer.ggml.pre") : "default";
  if (file.find("tokenizer.ggml.token_type")) {
    for (std::int64_t t : file.get_int_array("tokenizer.ggml.token_type")) {
      check(t >= 0 && t <= 6, file.path() + ": metadata 'tokenizer.ggml.token_type'", "values 0..6",
            t);
      v.token_types.push_back(static_cast<TokenType>(t));
    }
  }
  const auto id = [&](const char* key) -> std::int32_t {
    if (!file.find(key)) return -1;
    const std::uint64_t value = file.get_uint(key);
    check(value < v.tokens.size(), concat(file.path(), ": metadata '", key, "'"),
          concat("an id below ", v.tokens.size()), value);
    return static_cast<std::int32_t>(value);
  };
  v.bos_id = id("tokenizer.ggml.bos_token_id");
  v.eos_id = id("tokenizer.ggml.eos_token_id");
  try {
    return BpeTokenizer(std::move(v));
  } catch (const Error& e) {
    throw Error(concat(file.path(), ": ", e.what()));
  }
}

const BpeVocabulary& BpeTokenizer::vocabulary() const { return impl_->v; }

std::int64_t BpeTokenizer::vocab_size() const {
  return static_cast<std::int64_t>(impl_->v.tokens.size());
}

const std::string& BpeTokenizer::token(std::int32_t id) const {
  check(id >= 0 && id < vocab_size(), "token id", concat("0..", vocab_size() - 1), id);
  return impl_->v.tokens[static_cast<std::size_t>(id)];
}

TokenType BpeTokenizer::token_type(std::int32_t id) const {
  check(id >= 0 && id < vocab_size(), "token id", concat("0..", vocab_size() - 1), id);
  return impl_->v.token_types[static_cast<std::size_t>(id)];
}

std::int32_t BpeTokenizer::bos_id() const { return impl_->v.bos_id; }
std::int32_t BpeTokenizer::eos_id() const { return impl_->v.eos_id; }

std::int32_t BpeTokenizer::find(std::string_view token) const {
  const auto it = impl_->ids.find(std::string(token));
  return it == impl_->ids.end() ? -1 : it->second;
}

const std::string& BpeTokenizer::token_bytes(std::int32_t id) const {
  check(id >= 0 && id < vocab_size(), "token id", concat("0..", vocab_size() - 1), id);
  return impl_->bytes_of[static_cast<std::size_t>(id)];
}

void BpeTokenizer::Impl::bpe(const std::string& piece, std::vector<std::int32_t>& out) const {
  // One symbol per byte that has a token; a byte without one is dropped, as the `tokenizers`
  // crate drops a character outside the vocabulary when there is no unknown token.
  std::vector<std::int32_t> id;
  id.reserve(piece.size());
  for (char c : piece)
    if (const std::int32_t b = byte_ids[static_cast<unsigned char>(c)]; b >= 0) id.push_back(b);
  const std::size_t n = id.size();
  std::vector<std::size_t> next(n), prev(n);
  for (std::size_t i = 0; i < n; ++i) {
    next[i] = i + 1;               // n: none
    prev[i] = i == 0 ? n : i - 1;  // n: none
  }
  struct Candidate {
    std::int32_t rank;
    std::size_t left;
    std::int32_t left_id, right_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  const auto push = [&](std::size_t left) {
    if (left >= n || next[left] >= n) return;
    const auto it = merges.find(pair_key(id[left], id[next[left]]));
    if (it != merges.end()) queue.push({it->second.rank, left, id[left], id[next[left]]});
  };
  for (std::size_t i = 0; i + 1 < n; ++i) push(i);
  std::vector<bool> alive(n, true);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    const std::size_t right = next[c.left];
    // Stale: a symbol of the pair was merged away or changed since the pair was queued.
    if (!alive[c.left] || right >= n || id[c.left] != c.left_id || id[right] != c.right_id)
      continue;
    id[c.left] = merges.at(pair_key(c.left_id, c.right_id)).merged;
    alive[right] = false;
    next[c.left] = next[right];
    if (next[right] < n) prev[next[right]] = c.left;
    if (prev[c.left] < n) push(prev[c.left]);
    push(c.left);
  }
  for (std::size_t i = 0; i < n; i = next[i]) out.push_back(id[i]);
}

void BpeTokenizer::Impl::encode_text(std::string_view text, std::vector<std::int32_t>& out) const {
  const std::u32string s = decode_utf8_lossy(text);
  std::vector<std::pair<std::size_t, std::size_t>> pieces;
  std::size_t from = 0;
  for (std::size_t i = 0; i <= s.size(); ++i) {
    if (i < s.size() && !is_number(s[i])) continue;
    split_gpt2(s, from, i, pieces);  // the stretch before the numeric character
    if (i < s.size()) pieces.emplace_back(i, i + 1);
    from = i + 1;
  }
  std::string piece;
  for (const auto& [begin, end] : pieces) {
    piece.clear();
    for (std::size_t k = begin; k < end; ++k) append_utf8(piece, s[k]);
    bpe(piece, out);
  }
}

std::vector<std::int32_t> BpeTokenizer::encode(std::string_view text,
                                               BpeEncodeOptions options) const {
  std::vector<std::int32_t> out;
  const Impl& m = *impl_;
  if (!options.parse_special || m.special.empty()) {
    m.encode_text(text, out);
    return out;
  }
  // Step 1: the leftmost special token, the longest at that place (m.special is longest first).
  // next_at[k] caches where special token k next occurs, so the text is scanned once per token.
  std::vector<std::size_t> next_at(m.special.size());
  for (std::size_t k = 0; k < m.special.size(); ++k)
    next_at[k] = text.find(m.v.tokens[static_cast<std::size_t>(m.special[k])]);
  std::size_t from = 0;
  while (from < text.size()) {
    std::size_t best_at = std::string_view::npos;
    std::int32_t best = -1;
    for (std::size_t k = 0; k < m.special.size(); ++k) {
      const std::string& t = m.v.tokens[static_cast<std::size_t>(m.special[k])];
      if (next_at[k] != std::string_view::npos && next_at[k] < from)
        next_at[k] = text.find(t, from);
      const std::size_t at = next_at[k];
      if (at != std::string_view::npos && (best_at == std::string_view::npos || at < best_at)) {
        best_at = at;
        best = m.special[k];
      }
    }
    if (best < 0) break;
    m.encode_text(text.substr(from, best_at - from), out);
    out.push_back(best);
    from = best_at + m.v.tokens[static_cast<std::size_t>(best)].size();
  }
  if (from < text.size()) m.encode_text(text.substr(from), out);
  return out;
}

std::string BpeTokenizer::decode(const std::vector<std::int32_t>& ids) const {
  std::string out;
  for (std::int32_t id : ids) out += token_bytes(id);
  return out;
}

std::string format_chatml(const std::vector<ChatMessage>& messages, const ChatMlOptions& options) {
  std::string out;
  const auto turn = [&](std::string_view role, std::string_view content) {
    out.append("<|im_start|>").append(role).append("\n").append(content).append("<|im_end|>\n");
  };
  if (!options.default_system.empty() && !messages.empty() && messages.front().role != "system")
    turn("system", options.default_system);
  for (const ChatMessage& m : messages) turn(m.role, m.content);
  if (options.add_generation_prompt) out.append("<|im_start|>assistant\n");
  return out;
}

}  // namespace headcount
