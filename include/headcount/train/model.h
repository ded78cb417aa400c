// A small transformer that trains on the CPU, every layer with an explicit backward next to
// its forward (no tape, no graph: the structure is fixed and small).
//
//   tokens [B, T] -> tok_emb[token] + pos_emb[t]                     x [B, T, d_model]
//   (the Llama pieces, ModelConfig::rms_norm ... tied_head, change the norm, the positions,
//   the FFN, the biases and the head; see there)
//   `layers` blocks, pre-LN:  x = x + Attn(LN1(x));  x = x + FFN(LN2(x))
//                  post-LN: x = LN1(x + Attn(x));   x = LN2(x + FFN(x))
//   pre-LN adds a final LayerNorm (ln_f); then logits = x · head.weight + head.bias  [B, T, vocab]
//   loss = mean cross-entropy over the positions whose target is not Batch::kIgnore.
// Attn is multi-head / grouped-query / multi-query attention (heads, kv_heads, head_dim decoupled
// from d_model / heads), causal for a decoder, bidirectional for an encoder; FFN is
// GELU(x·W_up + b_up)·W_down + b_down with the erf GELU.
//
// Weights are [in, out] (x · W), the transpose of PyTorch's nn.Linear, named:
//   tok_emb [vocab, d_model], pos_emb [context, d_model],
//   blocks.{i}.ln1.weight/bias [d_model], blocks.{i}.attn.w_qkv [d_model, (heads + 2 kv_heads)
//   head_dim] (Q columns, then K, then V), blocks.{i}.attn.b_qkv, blocks.{i}.attn.w_o [heads
//   head_dim, d_model], blocks.{i}.attn.b_o, blocks.{i}.ln2.weight/bias, blocks.{i}.ffn.w_up
//   [d_model, d_ff], blocks.{i}.ffn.b_up, blocks.{i}.ffn.w_down [d_ff, d_model],
//   blocks.{i}.ffn.b_down, ln_f.weight/bias (pre-LN only), head.weight [d_model, vocab], head.bias
//   [vocab].
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "headcount/attention.h"
#include "headcount/context.h"
#include "headcount/model.h"
#include "headcount/tensor.h"
#include "headcount/train/task.h"
#include "nlohmann/json_fwd.hpp"

namespace headcount::train {

// The definition's own placement (model.h): one enum for both executors.
using NormPlacement = model::NormPlacement;

struct ModelConfig {
  std::int64_t vocab = 0;
  std::int64_t context = 0;  // positions of pos_emb: the longest sequence
  std::int64_t layers = 1;
  std::int64_t d_model = 0;
  std::int64_t heads = 1;
  std::int64_t kv_heads = 0;   // 0: = heads
  std::int64_t head_dim = 0;   // 0: = d_model / heads (must divide)
  std::int64_t d_ff = 0;       // 0: = 4 d_model
  std::optional<float> scale;  // default 1/sqrt(head_dim)
  NormPlacement norm = NormPlacement::pre;
  bool causal = true;           // decoder (true) or bidirectional encoder (false)
  bool attention_only = false;  // no FFN sub-blocks (attention-only transformer)
  float init_std = 0.02f;       // normal init of weights; biases zero, LayerNorm weight one
  // The W_Q and W_K columns of every W_qkv at this std instead (0: init_std). The claims
  // protocol's E-E: at 1/sqrt(d_model) the components of q and k have unit variance after
  // LayerNorm, so Var(q.k) = head_dim, the premise of Vaswani et al.'s footnote 4. The same draws
  // of the one stream, scaled: a model at 0 is bitwise the one before this field existed.
  float qk_init_std = 0;
  float ln_eps = 1e-5f;  // every LayerNorm's eps (PyTorch's default; BERT uses 1e-12)
  // Every bias vector (LayerNorm, attention Q/K/V and output, FFN, output head) held at its
  // initial zero: the backward leaves their gradients zero, so no optimizer moves them. The ESP
  // theorem's one-head ceiling (experiments/esp_paper.cpp) is proved for a model without free
  // biases; the claims protocol's E-A re-runs any one-head model above its ceiling this way.
  bool frozen_biases = false;
  // Per-layer head counts, for a model whose heads were pruned unevenly (the inference side's
  // pruned encoders): empty = `heads` and `kv_heads` in every layer. layer_kv_heads empty with
  // layer_heads set means one K/V head per query head in every layer. head_dim is the same in
  // every layer (set it: its default divides d_model by `heads`).
  std::vector<std::int64_t> layer_heads, layer_kv_heads;
  // The Llama family's pieces (model::Config's kinds), each on its own, pre-norm only:
  // rms_norm: RMSNorm for every norm (a weight, no bias); rope_base > 0: rotary positions inside
  // attention and no pos_emb table; swiglu: the FFN is (silu(x·W_gate) · x·W_up) · W_down, with
  // blocks.{i}.ffn.w_gate [d_model, d_ff]; biases = false: no bias anywhere; tied_head: the LM
  // head is tok_embᵀ (no head.weight).
  bool rms_norm = false;
  float rope_base = 0;
  bool swiglu = false;
  bool biases = true;
  bool tied_head = false;

  std::int64_t heads_in(std::int64_t layer) const {
    return layer_heads.empty() ? heads : layer_heads[static_cast<std::size_t>(layer)];
  }
  std::int64_t kv_heads_in(std::int64_t layer) const {
    return layer_kv_heads.empty() ? kv_heads : layer_kv_heads[static_cast<std::size_t>(layer)];
  }
  bool uniform_heads() const { return layer_heads.empty(); }
};

// Validates and fills the defaults; throws Error naming the field.
ModelConfig resolve(const ModelConfig& config);
nlohmann::json to_json(const ModelConfig& config);
ModelConfig model_config_from_json(const nlohmann::json& json);

struct Parameter {
  std::string name;
  Tensor value;  // f32
  Tensor grad;   // f32, same shape
  bool decay =
      true;  // AdamW weight decay applies (false for biases, LayerNorm, embeddings' choice)
  bool frozen = false;  // held at its value: its gradient is always zero (frozen_biases)
};

struct ForwardOptions {
  Kernel kernel = Kernel::streaming;
  // The count the loss is the mean over: 0, this batch's scored positions; > 0, this number
  // instead (the loss and every gradient are then the sum over this batch's positions divided
  // by it). Data parallel training passes the global batch's count, so that a replica's loss
  // and gradients are exactly its rows' share of the global batch's (src/distributed/).
  std::int64_t loss_normalizer = 0;
  // Per layer, per head gates on the concat buffer before W_O ([layers][heads], 1 = keep).
  // Empty: all ones. Their gradients (Michel et al. 2019's importance) go to gate_grads.
  std::vector<std::vector<float>> head_gates;
  // Keep each layer's attention probabilities for reports: [layers][B, heads, T, T] (the
  // forward then runs the reference kernel).
  bool keep_probs = false;
  // Key padding: empty, or one length per batch element in [0, seq_len]; keys at positions >=
  // key_lengths[b] are masked in every layer (a batch of sentences of different lengths). The
  // padded rows are still computed; give them Batch::kIgnore targets (or zero d_hidden in
  // backward_hidden) and nothing flows from them into the other rows or the gradients.
  std::vector<std::int64_t> key_lengths;
  // Distillation: null, or a teacher's logits [batch * seq_len, vocab]; the loss of each scored
  // row is then KL(teacher ‖ model) instead of the cross-entropy to its target (the targets
  // still say which rows are scored).
  const float* teacher_logits = nullptr;
};

struct StepResult {
  double loss = 0;
  std::int64_t scored = 0;
  std::vector<std::vector<double>> gate_grads;  // [layers][heads], dL/d gate
};

// Parameters are initialised from `seed` in the order above: every matrix and embedding
// ~ N(0, init_std) from one xoshiro256** + Box-Muller stream (the same values on every
// platform), LayerNorm weights 1, biases 0. decay: true for matrices and embeddings (nanoGPT's
// rule: every tensor of rank >= 2), false for biases and LayerNorm.
// The model owns its activation buffers (sized on the first call for a batch shape), so a
// warm forward_backward allocates nothing. Not copyable (the buffers are per model).
class Model {
 public:
  Model(const ModelConfig& config, std::uint64_t seed);
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  Model(Model&&) = default;
  Model& operator=(Model&&) = default;
  const ModelConfig& config() const { return config_; }

  std::vector<Parameter>& parameters() { return params_; }
  const std::vector<Parameter>& parameters() const { return params_; }
  std::int64_t parameter_count() const;

  // Loss and logits [B, T, vocab] (logits may be null); no gradients.
  double forward(Context& ctx, const Batch& batch, float* logits,
                 const ForwardOptions& options = {});
  // Forward + backward: overwrites every Parameter::grad with dL/dparam for this batch.
  // The backward uses options.kernel's attention_backward.
  StepResult forward_backward(Context& ctx, const Batch& batch, const ForwardOptions& options = {});
  // The blocks alone, from given input states instead of the embeddings (a BERT encoder's
  // embedding LayerNorm output, computed outside): x_in [batch, seq_len, d_model] -> hidden, the
  // last block's output [batch, seq_len, d_model] (before ln_f and the head). Keeps what
  // backward_hidden needs; options.keep_probs is refused (the reference kernel is not needed).
  void forward_hidden(Context& ctx, std::int64_t batch, std::int64_t seq_len, const float* x_in,
                      float* hidden, const ForwardOptions& options = {});
  // After forward_hidden, from d_hidden = dL/d(hidden) [batch, seq_len, d_model]: overwrites
  // every block Parameter::grad (tok_emb, pos_emb, ln_f and head grads are set to zero: they
  // took no part), writes dL/dx_in to d_x_in when not null, and returns dL/d gate [layers][heads].
  std::vector<std::vector<double>> backward_hidden(Context& ctx, const float* d_hidden,
                                                   float* d_x_in = nullptr);
  // After a backward (forward_backward or backward_hidden): each sequence's own dL/d gate,
  // [batch][layers][heads], the rows of sequence b alone summed in the order gate_grads sums
  // them (with key padding and zero gradients on the padded rows, the bits of that sequence
  // run alone). Per-example gradients in one batched backward: Michel et al.'s importance
  // averages |dL/dξ| per example, which the batch sum cannot give.
  std::vector<std::vector<std::vector<double>>> sequence_gate_grads() const;
  // After forward(..., keep_probs): layer l's probabilities [B, heads, T, T].
  const Tensor& probs(std::int64_t layer) const;

  // Heads over ranks (tensor parallel, Megatron-LM; headcount::distributed::make_heads_parallel
  // sets it): this model is one rank's slice of a wider one (its heads' columns of W_qkv and
  // rows of W_o, its columns of the FFN's W_up / W_gate and rows of W_down), and `sum` adds a
  // buffer of `count` floats over the ranks, in place. Each block's attention output and FFN
  // output are then summed before the residual add (the forward's two sums per block), and the
  // gradients of their inputs after the backward's (two more), so every other activation and
  // gradient is the same on every rank. Unset (the default): one process, nothing summed.
  using PartialSum = std::function<void(float* data, std::int64_t count)>;
  void set_partial_sum(PartialSum sum);

  struct Impl;  // the activation buffers (opaque; defined in src/train/model.cpp)

 private:
  ModelConfig config_;
  std::vector<Parameter> params_;
  std::shared_ptr<Impl> impl_;
};

}  // namespace headcount::train
