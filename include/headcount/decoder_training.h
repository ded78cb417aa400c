// Training a Llama-family decoder on the training executor (train/definition.h reads the
// decoder's definition: RMSNorm, rotary positions, SwiGLU, tied head, grouped K/V).
//
//   uptrain_decoder   a student (e.g. the MQA conversion of a GQA model) trained with AdamW on
//                     consecutive windows of a token stream, either by distillation (KL from
//                     the teacher's next-token distribution, the teacher run by LlamaDecoder)
//                     or on the text itself (next-token cross-entropy: the control that tells
//                     recovery from extra training on the same text)
//   decoder_gradient_importance   Michel et al.'s head importance |dL/dξ_h| over text windows
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "headcount/context.h"
#include "headcount/decoder.h"
#include "headcount/model.h"
#include "headcount/train/optimizer.h"

namespace headcount {

enum class UptrainLoss { distill, text };
UptrainLoss parse_uptrain_loss(const std::string& name);  // "distill" | "text"
const char* uptrain_loss_name(UptrainLoss loss);

struct DecoderUptrainOptions {
  std::int64_t steps = 0;      // exactly this many AdamW steps (> 0)
  std::int64_t seq_len = 512;  // tokens per window; step s trains on window s mod windows
  UptrainLoss loss = UptrainLoss::distill;
  // Constant after a short warm-up, no weight decay: a model already trained is nudged, not
  // regularised towards zero (which would move even a student equal to its teacher).
  train::OptimConfig optim = {
      .lr = 1e-4, .min_lr = 1e-4, .warmup_steps = 10, .weight_decay = 0, .grad_clip = 1.0};
  std::function<void(std::int64_t step, double loss)> progress;  // may be empty
};

struct DecoderUptrainResult {
  model::Weights student;  // the trained weights (the student's config)
  std::int64_t steps = 0, tokens = 0, windows = 0;
  // Loss per scored token: KL in nats (distill) or cross-entropy (text). first: step 0; last:
  // the mean of the last min(10, steps) steps.
  double first_loss = 0, last_loss = 0;
  double seconds = 0;
};

// Trains `student` (a Llama-family decoder; its shape may differ from the teacher's in K/V
// heads or pruned heads) on windows [s·seq_len, (s+1)·seq_len) of `ids`, every token but each
// window's last scored (its target is the next token). Deterministic: the same inputs give
// the same bits. Error (naming the parameter) for fewer than seq_len + 1 tokens, steps < 1,
// or a teacher whose vocabulary differs from the student's. The teacher runs only for distill.
DecoderUptrainResult uptrain_decoder(Context& ctx, const LlamaDecoder& teacher,
                                     const model::Weights& student,
                                     std::span<const std::int32_t> ids,
                                     const DecoderUptrainOptions& options);

struct DecoderGradientImportance {
  std::int64_t windows = 0, scored_tokens = 0;
  double mean_loss = 0;  // next-token cross-entropy over the scored tokens
  // [layer][query head]: mean over windows of |dL/dξ_h|, ξ_h the gate on head h's output (1 in
  // the forward), L the window's mean cross-entropy; `importance` divides each layer by its l2
  // norm (Michel et al. 2019).
  std::vector<std::vector<double>> raw, importance;
};

// Michel et al.'s gradient importance of every query head of a Llama-family decoder over `ids`
// in windows of `context` tokens (as LlamaDecoder::perplexity cuts them): in each window the
// tokens of its second half are scored (position t predicts token t + 1 of the window; the
// window's last position has no target). One forward and backward per window on the training
// executor. Error for fewer than `context` tokens or context < 4.
DecoderGradientImportance decoder_gradient_importance(Context& ctx, const model::Weights& weights,
                                                      std::span<const std::int32_t> ids,
                                                      std::int64_t context);

}  // namespace headcount
