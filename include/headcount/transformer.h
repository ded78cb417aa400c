// Transformer: the one inference executor. It runs any model::Config — BERT's post-norm encoder,
// Llama's pre-norm decoder, the models headcount trains — from a model::Weights, with the
// projections packed once (fp32, bf16 or int8), or a GGUF file's own quantized blocks.
//
//   x = tok_emb[id] (+ pos_emb[position]) (+ type_emb[0]);  x = EmbNorm(x)      (when the config
//   has them) per layer, post-norm:  x = Norm1(x + Attn(x));         x = Norm2(x + FFN(x))
//              pre-norm:   x = x + Attn(Norm1(x));         x = x + FFN(Norm2(x))
//   pre-norm:  x = FinalNorm(x);   logits = x · head (+ bias)                   (when the config
//   has a head)
//
// Norm is LayerNorm or RMSNorm, FFN is GELU(x·up)·down or SwiGLU, positions learned or rotary,
// each layer with its own head counts (pruned, GQA). Each residual add is fused into the norm
// that follows it. BertEncoder is this executor + WordPiece + pooling; LlamaDecoder is this
// executor + BPE + sampling.
//
// Two ways in:
//   forward(ids, batch, n, hidden): B padded sequences at once, no cache (an encoder; or a
//     decoder's whole sequences, causal). hidden [B, n, d_model] is the residual stream: the
//     model's last hidden states on return (FinalNorm applied for pre-norm models).
//   forward(ids, cache, which): one sequence through a KV cache (prefill when the cache is
//     empty, the decode kernel after); returns the logits of the last row or of every row.
//   decode(ids, caches): one new token for each of B sequences, each with its own cache, in one
//     pass over the weights (batched decoding; each row's bits those it gets alone).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

#include "headcount/attention.h"
#include "headcount/context.h"
#include "headcount/kv_cache.h"
#include "headcount/model.h"
#include "headcount/tensor.h"
#include "headcount/tokenizer.h"

namespace headcount {

class GgufFile;

enum class Logits { last, all };

struct TransformerForwardOptions {
  Kernel kernel = Kernel::streaming;
  // [total heads] factors on each head's output before its layer's W_O (layer-major: layer l's
  // heads after those of layers < l); 0 removes a head, 1 keeps it. Empty: every head kept.
  // Without a cache only.
  std::span<const float> head_mask;
  // Called after each layer's attention kernel with (layer, the kernel's params; params.lse
  // filled). Without a cache, or a cache's prefill (an empty cache).
  std::function<void(std::int64_t, const AttentionParams&)> observe_attention;
  // Run only layers [first_layer, end_layer) (end_layer -1: to the last). With first_layer > 0
  // the embeddings are skipped and `hidden` holds the output of layer first_layer - 1; results
  // equal the full forward's bitwise. Without a cache only. A pre-norm model's FinalNorm runs
  // only when the range ends at the last layer.
  std::int64_t first_layer = 0;
  std::int64_t end_layer = -1;
  // Padded batches: per sequence, the keys at positions >= key_lengths[b] are padding. Empty:
  // every row is a token. Without a cache only.
  std::span<const std::int64_t> key_lengths;
};

class Transformer {
 public:
  // Checks the weights against their config, then packs the projections in `dtype` (f32, bf16
  // or i8: simd/gemm.h has the arithmetic).
  explicit Transformer(const model::Weights& weights, DType dtype = DType::f32);
  ~Transformer();
  Transformer(Transformer&&) noexcept;
  Transformer& operator=(Transformer&&) noexcept;

  const model::Config& config() const;
  DType dtype() const;     // of the packed projections
  bool quantized() const;  // the GGUF file's own blocks (use_file_blocks)

  // A Llama-family model on a GGUF file's own Q4_1 / Q8_0 blocks (`config` read from the same
  // file: llama_config): every projection, FFN matrix and the LM head multiplied from the
  // blocks, with no fp32 copy of them ever built; only the token table (for the lookup) and
  // the norms are read as fp32.
  static Transformer on_file_blocks(const GgufFile& file, const model::Config& config);
  // Heads over MPI ranks: each sub-layer's partial output is summed over the ranks before its
  // residual add. Unset: one process.
  void set_partial_sum(std::function<void(float*, std::int64_t)> sum);

  // A KV cache for one sequence of up to `capacity` tokens, each layer with its own K/V heads.
  KvCache make_cache(std::int64_t capacity, CacheDType dtype = CacheDType::f32) const;

  // B sequences of n tokens (ids [B * n], row-major), no cache: hidden [B, n, d_model] as above.
  void forward(Context& ctx, std::span<const std::int32_t> ids, std::int64_t batch, std::int64_t n,
               const TensorView& hidden, const TransformerForwardOptions& options = {}) const;
  // A padded batch (tokenizer.h): its ids and shape, its lengths as the key lengths.
  void forward(Context& ctx, const TokenBatch& batch, const TensorView& hidden,
               const TransformerForwardOptions& options = {}) const;
  // One sequence through a KV cache: ids are the next tokens after those cached; returns the
  // logits [1 or n, vocab] (a model with an LM head).
  Tensor forward(Context& ctx, std::span<const std::int32_t> ids, KvCache& cache,
                 Logits which = Logits::last, const TransformerForwardOptions& options = {}) const;
  // A prompt's prefill in chunks: `ids` are the prompt's rows after those an earlier prefill()
  // (or the first forward()) put in `cache`, which must be fp32. Returns logits as forward()
  // does, each row bitwise what one forward() of the whole prompt gives it (the chunk attends
  // through the prefill's streaming kernel, not the decode kernel that forward() uses after a
  // cached prefix), so a server can prefill a long prompt between other sequences' decode
  // steps without changing any bit of what it computes. On an empty cache: forward().
  Tensor prefill(Context& ctx, std::span<const std::int32_t> ids, KvCache& cache,
                 Logits which = Logits::last) const;
  // One decode step of B sequences, each with its own cache (make_cache's, holding at least its
  // prompt): ids[b] is sequence b's next token. Returns logits [B, vocab]; row b is bitwise
  // what forward(ids[b], *caches[b]) returns alone: every projection, the FFN and the head are
  // one GEMM over the B rows (whose rows do not depend on each other), the decode kernel runs
  // per sequence over its own cache.
  Tensor decode(Context& ctx, std::span<const std::int32_t> ids,
                std::span<KvCache* const> caches) const;
  // logits [rows, vocab] = hidden [rows, d_model] · head (+ bias): the LM head alone.
  void logits(Context& ctx, const float* hidden, std::int64_t rows, float* out) const;

 private:
  struct Impl;
  void run(Context& ctx, std::span<const std::int32_t> ids, std::int64_t batch, std::int64_t n,
           float* x, std::span<KvCache* const> caches, const TransformerForwardOptions& options,
           bool continue_prefill = false) const;
  Tensor forward_cached(Context& ctx, std::span<const std::int32_t> ids, KvCache& cache,
                        Logits which, const TransformerForwardOptions& options,
                        bool continue_prefill) const;
  void check_cache(const KvCache& cache, std::int64_t tokens) const;
  Transformer();
  std::unique_ptr<Impl> impl_;
};

}  // namespace headcount
