// A Llama-family decoder (SmolLM2-135M from its GGUF file) on headcount's model definition,
// layers and kernels:
//
//   ids ─ token_embd[id] ─ layers × L:
//            h = RMSNorm1(x);  x = x + W_O · Attn(RoPE(W_Q h), RoPE(W_K h), W_V h)
//            h = RMSNorm2(x);  x = x + W_down · (silu(W_gate h) * W_up h)
//        ─ RMSNorm ─ logits = x · token_embdᵀ (the embedding tied as the LM head)
//
// The prompt (a cache that holds nothing yet) runs through MultiHeadAttention::prefill, i.e. the
// streaming kernel with a causal mask; every later token (or chunk of up to 16) through
// decode_step, i.e. the decode kernel reading the KvCache (fp32, bf16 or int8). Grouped-query
// attention is the layer's kv_heads (SmolLM2: 9 query heads read 3 K/V heads).
//
// Weights: llama_definition() reads the GGUF file by role (model::weight_table's GGUF names),
// dequantized to fp32 (ggml.h), with llama.cpp's Q/K row permutation undone (docs/gguf.md), so
// model::Weights holds exactly what transformers' LlamaForCausalLM holds when it loads the same
// file, under the same names; RoPE then rotates Hugging Face's half pairs (layers/rotary.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "headcount/bpe.h"
#include "headcount/context.h"
#include "headcount/decode.h"
#include "headcount/kv_cache.h"
#include "headcount/model.h"
#include "headcount/tensor.h"
#include "headcount/transformer.h"

namespace headcount {

class GgufFile;

// The model definition a GGUF file of general.architecture "llama" describes: the config from
// the llama.* keys (block_count, embedding_length, feed_forward_length, attention.head_count
// and head_count_kv (a number, or one per layer), rope.freq_base, rope.dimension_count = the
// head dim, attention.layer_norm_rms_epsilon, context_length; vocab from token_embd) and every
// tensor of its weight_table in fp32, Q and K rows un-permuted. Output::tied when the file has
// no output.weight. Error names the key or tensor that is missing, of another type or shape, or
// asks for what this decoder does not do (rope scaling, partial rotary). The tensors' types are
// checked before any is read: a tensor of a type other than F32, F16, Q8_0 or Q4_1 (K-quants,
// IQ*, BF16...) is one Error naming the first such tensor, the supported types and the types met.
model::Config llama_config(const GgufFile& file);
model::Weights llama_definition(const GgufFile& file);

// llama.cpp's Q/K row order -> Hugging Face's: row (head, 2i + h) of the file is row
// (head, h * head_dim/2 + i) of q_proj / k_proj (h in {0, 1}, i < head_dim / 2). `rows` x
// `cols` row-major, rows = heads * head_dim; in place.
void unpermute_rotary_rows(float* w, std::int64_t heads, std::int64_t head_dim, std::int64_t cols);

struct GenerateOptions {
  std::int64_t max_tokens = 128;  // new tokens at most (>= 1)
  float temperature = 0;          // 0: greedy (argmax; the lowest id on a tie)
  float top_p = 1;                // nucleus sampling when temperature > 0: (0, 1]
  std::uint64_t seed = 0;         // the sampler's generator (std::mt19937_64)
  CacheDType kv_dtype = CacheDType::f32;
  bool stop_at_eos = true;  // stop after the tokenizer's EOS (it is kept in `tokens`)
  // Called with each new token as soon as it is chosen (for streaming text).
  std::function<void(std::int32_t)> on_token;
};

struct GenerateResult {
  std::vector<std::int32_t> tokens;  // the new tokens (EOS included if it ended the run)
  std::int64_t prompt_tokens = 0;
  double prefill_seconds = 0;     // the prompt's forward pass and the first token's choice
  std::int64_t decode_steps = 0;  // tokens fed back one at a time (tokens.size() - 1)
  double decode_seconds = 0;      // those steps and the choices after them
  std::int64_t cache_bytes = 0;   // KvCache::bytes() of the run's cache
};

struct PerplexityResult {
  double perplexity = 0;     // exp(mean negative log-likelihood)
  double nll = 0;            // mean negative log-likelihood (nats per token)
  std::int64_t scored = 0;   // tokens scored
  std::int64_t windows = 0;  // windows of `context` tokens evaluated
  double seconds = 0;
};

// How the decoder multiplies by its weights (every projection, the FFN and the LM head, through
// the packed GEMM, packed_gemm.h): f32 (the weights as dequantized: the exactness reference),
// bf16 (rounded once to bf16, inputs rounded to bf16, fp32 sums) or i8 (each output column
// quantized once to int8 with its own scale, max|w| / 127, input rows quantized per row; exact
// int32 sums: 1 byte per weight read per token instead of 4). The norms, rotary positions,
// attention and the KV cache are the same in all three.
//
// quantized (`--weights quantized`; LlamaDecoder::load only): every projection, the FFN and the
// LM head multiply the GGUF file's own blocks, Q4_1 and Q8_0, as the file stores them (nothing
// requantized), with each input row quantized to int8 in blocks of 32 as llama.cpp does for
// these formats: exact int32 block sums, fp32 after (src/simd/qblock.h). 0.625 bytes per
// weight read per token for Q4_1 (1.06 for Q8_0) against 4 for f32. `weights` stays f32 (the
// embedding lookup, norms, attention and cache are the f32 path's).
struct DecoderOptions {
  DType weights = DType::f32;
  bool quantized = false;
};

// "fp32", "bf16", "int8" or "quantized" (the CLI's and Python's --weights / weights=) to
// options; anything else: Error naming `option` and the value.
DecoderOptions parse_decoder_weights(const std::string& name,
                                     const std::string& option = "--weights");
// What "auto" (the CLI's default --weights) means for a file: "quantized" (the file's own
// blocks, the fast path) when every matrix the projections, the FFN and the LM head multiply
// is stored as Q4_1 or Q8_0 blocks, else "fp32" (an F32/F16 file: the dequantized reference).
std::string auto_decoder_weights(const std::string& gguf_path);

// LlamaDecoder::generate's loop on any causal model with an LM head (a model headcount trained,
// say): the prompt through prefill, then up to options.max_tokens new tokens (at most the
// context), each chosen by sample_token and fed back through the KV cache. `eos` (-1: none)
// ends the run when options.stop_at_eos.
GenerateResult generate_tokens(Context& ctx, const Transformer& model,
                               std::span<const std::int32_t> prompt, const GenerateOptions& options,
                               std::int32_t eos = -1);

// The choice of each next token as generate_tokens makes it: one draw of the seeded generator
// (std::mt19937_64) per token, greedy runs included, so a sampled run's stream of draws does not
// depend on its temperature, then sample_token. A caller choosing tokens one step at a time
// (the server's continuous batching) with the same options and seed chooses generate's tokens.
// temperature and top_p as GenerateOptions (checked: Error naming them).
class TokenChooser {
 public:
  TokenChooser(float temperature, float top_p, std::uint64_t seed);
  std::int32_t operator()(std::span<const float> logits);

 private:
  float temperature_, top_p_;
  std::mt19937_64 rng_;
};

// The compiled-in default decoder file (<repo>/models/SmolLM2-135M-Instruct.Q4_1.gguf, which
// scripts/setup.sh puts there); the CLI's `generate` and `perplexity` use it when neither
// --model nor $HEADCOUNT_DECODER_MODEL names a file.
std::string default_decoder_model();

class LlamaDecoder {
 public:
  // Reads config, weights and tokenizer from a GGUF file (Error on any problem).
  static LlamaDecoder load(const std::string& gguf_path, const DecoderOptions& options = {});
  // From a definition already in memory (Family::llama; check_weights must pass) and its
  // tokenizer (vocab_size = config.vocab).
  LlamaDecoder(const model::Weights& weights, BpeTokenizer tokenizer,
               const DecoderOptions& options = {});
  ~LlamaDecoder();
  LlamaDecoder(LlamaDecoder&&) noexcept;
  LlamaDecoder& operator=(LlamaDecoder&&) noexcept;

  const model::Config& config() const;
  const BpeTokenizer& tokenizer() const;
  DType weights_dtype() const;
  bool quantized() const;  // DecoderOptions::quantized
  // "fp32", "bf16", "int8" or "quantized", as parse_decoder_weights reads them.
  std::string weights_name() const;
  // The executor that runs the layers (headcount/transformer.h).
  const Transformer& executor() const;

  // A cache for one sequence of up to `capacity` positions (<= config().context).
  KvCache make_cache(std::int64_t capacity, CacheDType dtype = CacheDType::f32) const;

  // One step of the model (a prompt's prefill, or tokens after a cached prefix) comes from the
  // executor: executor().forward(ctx, ids, cache, Logits::last or all) returns the logits.

  // Prompt, then up to max_tokens new tokens, each fed back through the cache.
  GenerateResult generate(Context& ctx, std::span<const std::int32_t> prompt,
                          const GenerateOptions& options = {}) const;

  // Perplexity of `ids` as llama.cpp's `perplexity` computes it: windows of `context` tokens
  // taken back to back (a last partial window is dropped), each from a fresh cache; in each,
  // the tokens of the second half are scored (position i's logits predict token i + 1, for
  // i from context/2 to context - 2), so each scored token is predicted from at least
  // context/2 tokens. No BOS is put in front of a window (SmolLM2's file asks for none). context >=
  // 4 and at most config().context; Error if ids has fewer than `context` tokens.
  PerplexityResult perplexity(Context& ctx, std::span<const std::int32_t> ids,
                              std::int64_t context) const;

 private:
  LlamaDecoder();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Picks the next token from one row of logits: argmax when temperature == 0 (lowest id on a
// tie), else softmax(logits / temperature) in double, cut to the smallest set of most likely
// tokens whose probabilities sum to >= top_p, sampled with `uniform` in [0, 1).
std::int32_t sample_token(std::span<const float> logits, float temperature, float top_p,
                          double uniform);

}  // namespace headcount
