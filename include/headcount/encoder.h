// A BERT sentence encoder (all-MiniLM-L6-v2 and any model directory with the same files), run on
// headcount's own attention layer:
//
//   ids [B, n] ─ embeddings: word[id] + position[i] + token_type[0], LayerNorm
//              ─ layers × L:  x = LayerNorm(x + MultiHeadAttention(x, key_lengths))
//                             x = LayerNorm(x + W2 · GELU(W1 · x + b1) + b2)       (post-LN)
//              ─ mean over the valid tokens of each row ([CLS] and [SEP] included)
//              ─ L2 normalisation (when the model's modules.json has a Normalize module)
//
// A model directory holds model.safetensors, config.json and vocab.txt, and optionally
// tokenizer_config.json (lower-casing, accents), sentence_bert_config.json (max_seq_length) and
// 1_Pooling/config.json (must ask for mean pooling) and modules.json (Normalize).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "headcount/attention.h"
#include "headcount/context.h"
#include "headcount/model.h"
#include "headcount/safetensors.h"
#include "headcount/tensor.h"
#include "headcount/tokenizer.h"
#include "headcount/transformer.h"

namespace headcount {

struct EncoderConfig {
  std::int64_t vocab_size = 0;
  std::int64_t hidden_size = 0;  // d_model
  std::int64_t layers = 0;
  std::int64_t heads = 0;              // num_attention_heads: per layer before pruning
  std::int64_t intermediate_size = 0;  // d_ff
  std::int64_t max_position_embeddings = 0;
  std::int64_t type_vocab_size = 0;
  float layer_norm_eps = 1e-12f;
  bool normalize = true;       // L2-normalise the pooled embedding
  TokenizerOptions tokenizer;  // max_length = sentence-transformers' max_seq_length
  // Hugging Face's head pruning convention (config.json "pruned_heads": {"layer": [heads]}):
  // per layer, the original indices (0 .. heads-1) of the heads removed, ascending. Empty, or
  // one empty list per layer: nothing pruned. head_dim stays hidden_size / heads.
  std::vector<std::vector<std::int64_t>> pruned_heads;
  // Ours (config.json "headcount_kv_heads": one integer, or one per layer): K/V heads per layer
  // for grouped-query attention; each must divide the layer's query heads. Empty: MHA.
  std::vector<std::int64_t> kv_heads;

  std::int64_t head_dim() const { return hidden_size / heads; }
  std::int64_t layer_heads(std::int64_t layer) const;     // query heads left in `layer`
  std::int64_t layer_kv_heads(std::int64_t layer) const;  // K/V heads of `layer`
  std::int64_t total_heads() const;                       // sum of layer_heads: a head mask's size
  std::int64_t head_offset(std::int64_t layer) const;     // first index of `layer` in a head mask
  // The original index of the `head`-th remaining head of `layer`.
  std::int64_t original_head(std::int64_t layer, std::int64_t head) const;
  bool is_pruned() const;   // some head removed
  bool is_grouped() const;  // some layer with fewer K/V heads than query heads
};

// Checks pruned_heads and kv_heads against the rest of the config (sizes, ranges, order, at least
// one head left per layer, kv_heads dividing each layer's heads); Error names the field.
void validate_head_layout(const EncoderConfig& config, const std::string& where);

// The compiled-in default model directory (<repo>/models/all-MiniLM-L6-v2, which
// scripts/setup.sh fills).
std::string default_model_dir();

// Throws Error("model: expected a directory with model.safetensors, config.json, vocab.txt,
// got <dir> (<what is missing>)") unless `dir` has the three files.
void check_model_dir(const std::string& dir);

// Reads config.json (+ the optional files above) and checks every field it uses.
EncoderConfig read_encoder_config(const std::string& model_dir);

// The encoder as a configuration of the one transformer definition (model.h): family bert,
// post-LayerNorm, learned positions, token types, erf GELU, hidden-state output; each layer's
// heads and K/V heads as the config says. Its weight_table is the checkpoint's: every tensor
// name with its shape (PyTorch layout, [out, in]); a checkpoint must have each of them (extra
// tensors, such as position_ids or the pooler, are ignored).
model::Config bert_definition(const EncoderConfig& config);

// "" or "bert.": the prefix a checkpoint puts before the table's names (BertForPreTraining
// exports write "bert.embeddings...").
std::string bert_checkpoint_prefix(const SafetensorsFile& file);

struct EmbedOptions {
  std::int64_t batch_size = 32;  // sequences per forward pass, >= 1
  bool normalize = true;         // L2-normalise (if the model does); false: plain mean pooling
  Kernel kernel = Kernel::streaming;
  std::span<const float> head_mask;  // as TransformerForwardOptions::head_mask
  // Called after each batch with (sentences done, total), for progress reports.
  std::function<void(std::int64_t, std::int64_t)> progress;
};

// How the encoder's projections (W_qkv, W_o, the FFN) compute. f32: fp32 weights and inputs.
// bf16: weights rounded to bf16 once at load, each projection's input rows rounded to bf16,
// products summed in fp32 and bias, GELU, attention, LayerNorm and pooling in fp32
// (vdpbf16ps where the CPU has AVX512_BF16; elsewhere the same arithmetic widened to fp32).
// i8: weights quantised to int8 once at load (one scale per output column), each projection's
// input rows quantised to int8 (one scale per row, so a sentence's result does not depend on
// its batch), exact int32 sums (vpdpbusd where the CPU has AVX512_VNNI), then scales, bias,
// GELU and everything else in fp32 (simd/gemm.h has the layout and the arithmetic).
struct EncoderLoadOptions {
  DType dtype = DType::f32;  // f32, bf16 or i8
};

// "fp32" → f32, "bf16" → bf16, "int8" → i8; anything else: Error("dtype: expected fp32, bf16
// or int8, got ...").
DType parse_encoder_dtype(const std::string& name);

class BertEncoder {
 public:
  // Loads config, tokenizer and weights from a model directory; throws Error on any problem.
  static BertEncoder load(const std::string& model_dir, const EncoderLoadOptions& options = {});
  BertEncoder(EncoderConfig config, const SafetensorsFile& weights, WordPieceTokenizer tokenizer,
              const EncoderLoadOptions& options = {});
  // Where the encoder takes each tensor of model::weight_table(bert_definition(config)) from: the
  // f32 tensor of that name (without any "bert." prefix), which must have that shape (throw Error
  // naming the tensor otherwise). The safetensors constructor reads the file through one; weights
  // already in memory (pruned or converted ones, compress.h's encoder_from_weights) are handed over
  // through another, with no model directory written.
  using WeightSource =
      std::function<Tensor(const std::string& name, const std::vector<std::int64_t>& shape)>;
  BertEncoder(EncoderConfig config, const WeightSource& weights, WordPieceTokenizer tokenizer,
              const EncoderLoadOptions& options = {});
  ~BertEncoder();
  BertEncoder(BertEncoder&&) noexcept;
  BertEncoder& operator=(BertEncoder&&) noexcept;

  const EncoderConfig& config() const;

  // Heads over ranks (headcount::distributed::heads_parallel_encoder sets it): this encoder is
  // one rank's slice of a wider one (some of each layer's heads, a share of the FFN columns)
  // and `sum` adds `count` floats over the ranks in place; every layer's attention output and
  // FFN output are then summed before their residual add and LayerNorm, so the residual stream
  // (and every embedding) is the whole model's on every rank. Unset: one process.
  void set_partial_sum(std::function<void(float* data, std::int64_t count)> sum);
  const WordPieceTokenizer& tokenizer() const;
  DType dtype() const;  // the projections' dtype (EncoderLoadOptions)
  // The executor that runs the layers (headcount/transformer.h).
  const Transformer& executor() const;
  std::int64_t dim() const { return config().hidden_size; }

  // The last hidden states of one padded batch come from the executor:
  // executor().forward(ctx, batch, hidden [batch.batch, batch.seq_len, d_model], options).

  // Pooled (and normalised, if asked) embeddings of one padded batch: out [batch.batch, d_model].
  void embed_batch(Context& ctx, const TokenBatch& batch, const TensorView& out,
                   bool normalize = true, Kernel kernel = Kernel::streaming,
                   std::span<const float> head_mask = {}) const;

  // Mean over each row's valid tokens of hidden [batch.batch, batch.seq_len, d_model] (a
  // forward's output), L2-normalised if asked and the model does: out [batch.batch, d_model].
  void pool(const TokenBatch& batch, const float* hidden, float* out, bool normalize = true) const;

  // Embeds texts in input order: [texts.size(), d_model]. Dynamic batching: texts are sorted by
  // token count and batched with their neighbours, so padding costs little. A sentence's
  // embedding is bitwise the same whatever the batch size, the padding and the thread count
  // (on a given instruction set): the projections run on the packed GEMM (tests:
  // test_encoder_invariance.cpp).
  Tensor embed(Context& ctx, const std::vector<std::string>& texts,
               const EmbedOptions& options = {}) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Cosine similarity of two vectors of length n (0 if either is zero).
double cosine_similarity(const float* a, const float* b, std::int64_t n);

// Encoder throughput, for `headcount bench --suite encoder`: embeds `texts` (tokenisation,
// dynamic batching, forward, pooling: all of embed()) `repeats` times after one untimed warm-up
// pass, and reports the median pass.
struct EncoderTiming {
  std::int64_t sentences = 0;  // per pass
  std::int64_t tokens = 0;     // valid tokens per pass ([CLS]/[SEP] included)
  std::int64_t batch_size = 0;
  int threads = 0;
  std::vector<double> seconds;  // every timed pass
  double median_seconds = 0;
  double sentences_per_second = 0;  // sentences / median_seconds
};
EncoderTiming time_encoder(Context& ctx, const BertEncoder& encoder,
                           const std::vector<std::string>& texts, std::int64_t batch_size,
                           int repeats = 3, Kernel kernel = Kernel::streaming);

}  // namespace headcount
