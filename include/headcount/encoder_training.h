// Gradients through a BERT encoder (all-MiniLM-L6-v2): its layers run by the training executor
// (train/definition.h reads the encoder's definition, WeightParts::layers), so the explicit
// backward gives head-gate gradients and trains a converted model.
//
//   sentence ids ─ BertEncoder::forward(end_layer = 0): word + position + token type 0, LayerNorm
//                  (the embeddings stay frozen: computed by the encoder, a fixed input x_in)
//                ─ train::Model::forward_hidden: the layers, post-LN, bidirectional, erf GELU,
//                  LayerNorm eps from config.json, attention biases in b_qkv / b_o
//                ─ final hidden states [B, T, d]; backward_hidden from their gradient
//
// Any model the encoder runs (pruned unevenly, grouped-query): the executor takes per-layer head
// counts and key padding, on whose valid rows it gives each sentence's bits alone.
//
//   gradient_head_importance   Michel et al. 2019: I_h = mean over STS pairs of |dL/dξ_h|, ξ_h the
//                              gate on head h's output, L the cosine-MSE loss of one pair,
//                              then each layer's I divided by its l2 norm
//   distill_encoder            uptraining: a student (e.g. the GQA conversion) trained with AdamW
//                              to match the teacher's final hidden states on a corpus
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "headcount/compress.h"
#include "headcount/context.h"
#include "headcount/encoder.h"
#include "headcount/sts.h"
#include "headcount/train/definition.h"
#include "headcount/train/model.h"
#include "headcount/train/optimizer.h"

namespace headcount {

// The layers' input: ids [batch * seq_len] -> x_in [batch, seq_len, d] (the encoder's embedding
// LayerNorm output; padded rows are computed too, from the pad token, and never read).
Tensor encoder_layer_input(Context& ctx, const BertEncoder& encoder, const TokenBatch& batch);

// The pair loss and its gradient with respect to the two pooled (mean) embeddings u and v:
//   c = u·v / (|u| |v|),  L = (c - gold / 5)²
//   dL/du = 2 (c - y) (v / (|u| |v|) - c u / |u|²)   (and symmetrically for v)
// Returned: L; du, dv [n] receive the gradients (either may be null).
double cosine_mse_loss(const double* u, const double* v, std::int64_t n, double gold, double* du,
                       double* dv);

struct GradientImportanceOptions {
  Kernel kernel = Kernel::streaming;
  // Pairs per padded batch (sorted by the longer sentence's token count). The result is the
  // same bits for every batch size; larger batches give the GEMMs more rows.
  std::int64_t batch_size = 16;
  std::function<void(std::int64_t, std::int64_t)> progress;  // (pairs done, total)
};

struct GradientImportance {
  std::int64_t pairs = 0;
  double mean_loss = 0;
  std::vector<std::int64_t> layer_heads;  // query heads per layer (a pruned model's shape)
  // Layer-major, layer l's heads after those of the layers before it (l * heads + h when every
  // layer has `heads`):
  std::vector<double> raw;         // mean over pairs of |dL/dξ_h|
  std::vector<double> importance;  // raw with each layer divided by its l2 norm (Michel et al.)
};

// Over every pair: the two sentences through the encoder's layers on the training executor
// (padded batches of pairs), the cosine-MSE loss of their mean-pooled embeddings, the gates'
// gradients of both sentences added, |.| averaged over pairs.
GradientImportance gradient_head_importance(Context& ctx, const BertEncoder& encoder,
                                            const EncoderWeights& weights,
                                            const std::vector<StsPair>& pairs,
                                            const GradientImportanceOptions& options = {});

// Heads ascending by importance (ties: lower index first), layer-major indices l * heads + h.
std::vector<std::size_t> least_important_first(const GradientImportance& importance);

struct DistillOptions {
  std::int64_t steps = 0;        // > 0: exactly this many steps (reproducible); 0: until `seconds`
  double seconds = 0;            // wall-clock budget when steps == 0
  std::int64_t batch_size = 16;  // sentences per step (neighbouring token counts, padded)
  std::int64_t min_tokens = 8, max_tokens = 64;  // sentences kept by token count ([CLS], [SEP] in)
  std::uint64_t seed = 0;                        // the batch order
  train::OptimConfig optim = {
      .lr = 1e-4, .min_lr = 1e-4, .warmup_steps = 20, .weight_decay = 0.01, .grad_clip = 1.0};
  Kernel kernel = Kernel::streaming;
  std::function<void(std::int64_t step, double loss)> progress;
};

struct DistillResult {
  EncoderWeights student;  // the trained weights (the student's config)
  std::int64_t steps = 0, sentences = 0, batches_available = 0;
  double first_loss = 0, last_loss = 0;      // MSE per element of the final hidden states
  double wall_seconds = 0, cpu_seconds = 0;  // the training loop; cpu: getrusage, user + system
};

// Sentences of `text` (split at . ! ? and blank lines, whitespace collapsed), in order.
std::vector<std::string> split_sentences(const std::string& text);

// Trains `student` (the teacher's shape, pruned heads included, but for K/V heads) to match the
// teacher's final hidden states: L = mean over tokens and features of (h_student - h_teacher)²,
// on padded batches of `sentences` sorted by token count, in a seeded random order (cycled),
// AdamW on every layer tensor; the embeddings stay the teacher's.
DistillResult distill_encoder(Context& ctx, const BertEncoder& teacher,
                              const EncoderWeights& student,
                              const std::vector<std::string>& sentences,
                              const DistillOptions& options);

}  // namespace headcount
