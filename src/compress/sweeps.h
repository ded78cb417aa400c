// The compression sweeps: whole measurements over many compressed variants of one encoder, each
// returning the JSON its command writes and its page draws (report/compress_report.h). The
// commands (prune-curve, prune-speed, convert-sweep) parse options, read files and write
// results; what is measured, and in which order, lives here.
//
//   prune_curve     STS-B test Spearman against the fraction of heads removed (0 ... 90% in
//                   10% steps) for the ablation, gradient, iterative and random orders, the
//                   ablation points again on physically pruned models
//   prune_speed     sentences/s of physically pruned models at several batch sizes beside the
//                   cost model's multiply-adds, in interleaved rounds
//   convert_sweep   per K/V head count and method: STS-B test Spearman and KV-cache bytes
//   decoder_kv_sweep  the same question for a Llama-family decoder: perplexity, logits against
//                   the original, KV-cache bytes per token
//   decoder_prune_curve  a grouped decoder's K/V groups removed physically: test perplexity
//                   against the share removed (ablation order on dev, seeded random orders),
//                   and prefill/decode speed of the pruned models beside their multiply-adds
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "headcount/compress.h"
#include "headcount/context.h"
#include "headcount/decoder.h"
#include "headcount/decoder_heads.h"
#include "headcount/decoder_training.h"
#include "headcount/head_analysis.h"
#include "headcount/sts.h"
#include "nlohmann/json.hpp"

namespace headcount::compress {

// Heads removed at 0, 10, ..., 90% of `total`: round(f * total).
inline std::vector<std::int64_t> curve_counts(std::int64_t total) {
  std::vector<std::int64_t> counts;
  for (int tenth = 0; tenth <= 9; ++tenth)
    counts.push_back(std::llround(tenth * static_cast<double>(total) / 10.0));
  return counts;
}

// The re-ranking steps of an iterative ranking up to `count`: the curve's counts below it, then
// count.
inline std::vector<std::int64_t> iterative_counts(std::int64_t total, std::int64_t count) {
  std::vector<std::int64_t> steps;
  for (std::int64_t k : curve_counts(total))
    if (k > 0 && k < count) steps.push_back(k);
  if (count > 0) steps.push_back(count);
  return steps;
}

// Heads as {"layer", "head"} objects, in order (indices layer * heads + head).
nlohmann::json head_order_json(const std::vector<std::size_t>& order, std::int64_t heads);

struct PruneCurveOptions {
  std::string model_name;            // recorded in the JSON
  std::string rank_file, test_file;  // recorded in the JSON
  std::int64_t random_orders = 5, seed = 0, batch = 32;
  bool iterative = true, physical = true, gradient = true;
  std::int64_t gradient_pairs = 0, iterative_pairs = 0;  // 0: every dev pair
  // Rankings measured earlier (skip measuring them): the ablation of `headcount heads --ablate`,
  // and an iterative order with the seconds it took (iterative_from names its file).
  std::optional<HeadAblation> ablation;
  std::string ablation_from;
  std::optional<std::vector<std::size_t>> iterative_order;
  std::string iterative_from;
  double iterative_seconds_measured = 0;
  std::function<void(const std::string&)> log;  // one line per stage (may be empty)
  std::function<void(std::int64_t, std::int64_t)> test_progress;  // (done, total); may be empty
};

// Rankings on `dev` only; every order scored on `test`. The model must be an unpruned
// multi-head one.
nlohmann::json prune_curve(Context& ctx, const EncoderWeights& weights,
                           const std::vector<StsPair>& dev, const std::vector<StsPair>& test,
                           const PruneCurveOptions& options);

struct PruneSpeedOptions {
  std::vector<double> fractions = {0, 0.2, 0.4, 0.5, 0.6, 0.8};  // the first: the ratios' base
  std::vector<std::int64_t> batches = {1, 4, 16, 32, 64};
  int repeats = 3;
  // Called once per row as it is measured (for a table on stderr); may be empty.
  std::function<void(const nlohmann::json& row)> row;
};

// Every pruned model (`order`, least important first: round(f * heads) removed for each f) is
// built first; then, per batch size, each timed round embeds `texts` with every model once in
// turn (after one untimed warm-up each), so all ratios come from the same minutes of the same
// machine, and the median round counts. Returns the rows: fraction, heads_removed, batch,
// sentences_per_second, speedup_vs_first, macs_per_pass (the cost model's, at each sentence's
// length), mac_ratio_vs_first, seconds.
nlohmann::json prune_speed(Context& ctx, const EncoderWeights& weights,
                           const std::vector<std::string>& texts,
                           const std::vector<std::size_t>& order, const PruneSpeedOptions& options);

struct ConvertSweepOptions {
  std::vector<std::int64_t> kv_heads = {12, 6, 4, 3, 2, 1};
  std::vector<KvConvertMethod> methods = {KvConvertMethod::mean, KvConvertMethod::aligned,
                                          KvConvertMethod::clustered};
  std::int64_t batch = 32;
  std::function<void(const nlohmann::json& row)> row;  // once per row as measured; may be empty
};

// Per K/V head count and method: the converted model's STS-B Spearman and Pearson on `test`,
// its KV-cache bytes per token and the seconds the point took. Every head count is checked
// against every layer before the first evaluation.
nlohmann::json convert_sweep(Context& ctx, const EncoderWeights& weights,
                             const std::vector<StsPair>& test, const ConvertSweepOptions& options);

struct DecoderKvSweepOptions {
  // K/V heads per layer to try: the model's own count (as loaded), fewer (pooled groups, one row
  // per method, model::convert_kv_heads) or one per query head (model::repeat_kv_heads, the MHA
  // export). Empty: every divisor of the query heads, most first.
  std::vector<std::int64_t> kv_heads;
  // How fewer K/V heads are made, one row per method for each such count: mean and/or aligned
  // (rotary-commuting rotations before the mean; model::convert_kv_heads).
  std::vector<KvConvertMethod> methods = {KvConvertMethod::mean, KvConvertMethod::aligned};
  std::int64_t context = 512;      // perplexity windows (LlamaDecoder::perplexity)
  std::int64_t logit_tokens = 64;  // the first tokens whose logits are compared with the original's
  DType weights = DType::f32;
  // uptrain.steps > 0: each pooled variant is then trained (uptrain_decoder, the loaded model
  // as teacher) on uptrain_ids and measured again; with the text loss the loaded model is
  // trained the same way too (the control). Distilling the loaded model from itself would
  // change nothing (zero gradient), so the distill control is the loaded model.
  DecoderUptrainOptions uptrain;
  std::span<const std::int32_t> uptrain_ids;
  std::function<void(const nlohmann::json& row)> row;  // once per row as measured; may be empty
};

// The price of sharing K/V in a decoder (issue 36): per K/V head count, the perplexity of `ids`
// (llama.cpp's windows), the largest logit difference from the model as loaded on its first
// `logit_tokens` tokens, and the KV cache's bytes per token (every layer, fp32 / bf16 / int8).
// Clustered grouping is refused: it reorders query heads across K/V groups, which a grouped model
// cannot do without first repeating its K/V heads.
nlohmann::json decoder_kv_sweep(Context& ctx, const model::Weights& weights,
                                const BpeTokenizer& tokenizer, std::span<const std::int32_t> ids,
                                const DecoderKvSweepOptions& options);

struct DecoderPruneCurveOptions {
  std::int64_t context = 512;  // perplexity windows (LlamaDecoder::perplexity)
  std::int64_t random_orders = 5, seed = 0;
  DType weights = DType::f32;
  // Speed: the ablation order's models at these shares of the removable groups (the first is
  // the ratios' base), each timed on a prefill of `speed_prompt` tokens of the test text and
  // `speed_decoded` greedy tokens after it, in `speed_rounds` interleaved rounds (medians).
  // Empty: no speed.
  std::vector<double> speed_fractions = {0, 0.3, 0.6};
  std::int64_t speed_prompt = 512, speed_decoded = 32;
  int speed_rounds = 3;
  // The dev NLL rises of an earlier run on the same model and dev text (one per group, layer by
  // layer): the ranking is taken from them instead of measured; `ablation_from` names the file.
  std::optional<std::vector<double>> ablation;
  std::string ablation_from;
  // A second ranking on the same dev text by gradient (decoder_gradient_importance: Michel et
  // al.'s |dL/dξ_h| summed over each group's query heads), its curve scored beside the ablation
  // order's at every point.
  bool gradient = true;
  // Per point and order, the in-context loss on repeated random sequences (decoder_heads.h): what
  // a ranking on prose does to copying from context. sequences = 0: not measured.
  InductionOptions in_context = {.sequences = 16, .length = 64, .seed = 0};
  std::function<void(const std::string&)> log;  // one line per stage (may be empty)
};

// Fewer heads in a grouped-query decoder (issue 36). The unit removed is a whole K/V group: its
// query heads and its K/V head (model::remove_heads; a K/V head cannot go without its query
// heads, and a query head alone would leave groups of unequal size, which the kernels' fixed
// heads/kv_heads ratio cannot hold). Ranking on `dev` only: each group removed alone, its
// importance the rise of dev NLL. Every point of the curve is a physically pruned model scored
// on `test`: 0, 10, ... 90% of the groups (as many as leave one group per layer), taken in the
// ablation order and in `random_orders` seeded orders (a group that would empty its layer is
// skipped for the next). Multiply-adds per token come from the shapes (projections, FFN, LM
// head; the attention's at the speed prompt's length).
nlohmann::json decoder_prune_curve(Context& ctx, const model::Weights& weights,
                                   const BpeTokenizer& tokenizer, std::span<const std::int32_t> dev,
                                   std::span<const std::int32_t> test,
                                   const DecoderPruneCurveOptions& options);

}  // namespace headcount::compress
