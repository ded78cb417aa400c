// What the heads of a BERT encoder do, measured over real text:
//   analyze_heads    per-head averages of the row statistics of head_stats.h (Clark et al.
//                    2019, "What Does BERT Look At?") over every token of every sentence, and
//                    a role per head by the rules of assign_role
//   ablate_heads     the change of STS-B Spearman when one head alone is removed (its slice of
//                    the concat buffer zeroed before W_O), for every head
//   attention_maps   the full probabilities of every head for one sentence (for heatmaps)
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "headcount/context.h"
#include "headcount/encoder.h"
#include "headcount/sts.h"

namespace headcount {

// The analyses index heads as layer * heads + head, so they take unpruned models only (a
// converted GQA model is fine): Error("model: expected every layer with all N heads ...") else.
void check_unpruned(const EncoderConfig& config);

// Relative positions whose attention is measured: -3..+3 (-1 previous token, 0 self, +1 next).
inline constexpr std::array<std::int64_t, 7> kHeadOffsets = {-3, -2, -1, 0, 1, 2, 3};
inline constexpr std::size_t kOffsetIndex0 = 3;  // index of offset 0 in kHeadOffsets

enum class HeadRole {
  previous_token,
  self,
  next_token,
  positional,
  cls_sink,
  sep_sink,
  punctuation,
  broad,
  mixed
};
inline constexpr std::array<HeadRole, 9> kAllHeadRoles = {
    HeadRole::previous_token, HeadRole::self,     HeadRole::next_token,
    HeadRole::positional,     HeadRole::cls_sink, HeadRole::sep_sink,
    HeadRole::punctuation,    HeadRole::broad,    HeadRole::mixed};

// One head's statistics, each the mean over every valid query row of every sentence.
struct HeadStatistics {
  std::int64_t layer = 0, head = 0;
  std::int64_t rows = 0;                     // query rows averaged
  std::array<double, 7> offsets{};           // attention to i + kHeadOffsets[k]
  double cls = 0, sep = 0, punctuation = 0;  // attention to [CLS], [SEP], punctuation tokens
  double entropy = 0;                        // nats
  double uniform_entropy = 0;                // ln(visible keys): a uniform row's entropy
  double distance = 0;                       // mean |j - i|, tokens
  double mass = 0;                           // sum of the row's probabilities (1: a check)
  HeadRole role = HeadRole::mixed;

  double previous() const { return offsets[kOffsetIndex0 - 1]; }
  double self() const { return offsets[kOffsetIndex0]; }
  double next() const { return offsets[kOffsetIndex0 + 1]; }
  // entropy / uniform_entropy: 1 for a head that averages evenly, near 0 for one that points.
  double normalized_entropy() const {
    return uniform_entropy > 0 ? entropy / uniform_entropy : 0.0;
  }
};

// The role rules, applied in order to a head's averages:
//   1. the largest of its attention to offsets -3..+3, [CLS], [SEP] and punctuation is its
//      target; if it is >= kRoleTargetShare (0.5), the head's role is that target's:
//      offset -1 previous_token, 0 self, +1 next_token, +-2 or +-3 positional, [CLS] cls_sink,
//      [SEP] sep_sink, punctuation punctuation;
//   2. otherwise broad if normalized_entropy() >= kRoleBroadEntropy (0.9): an averaging head;
//   3. otherwise mixed: no single target dominates.
inline constexpr double kRoleTargetShare = 0.5;
inline constexpr double kRoleBroadEntropy = 0.9;
HeadRole assign_role(const HeadStatistics& head);
const char* role_name(HeadRole role);                 // "previous-token", "[SEP] sink", ...
const char* role_rule(HeadRole role);                 // the rule, for legends
std::string role_target(const HeadStatistics& head);  // e.g. "prev 0.62"

struct HeadAnalysisOptions {
  std::int64_t batch_size = 32;
  // streaming: the second pass over the streaming kernel's lse (O(n) memory);
  // reference: the reference kernel's probabilities (the h*n^2 grid), reduced.
  Kernel stats_kernel = Kernel::streaming;
  std::function<void(std::int64_t, std::int64_t)> progress;  // (sentences done, total)
};

struct HeadAnalysis {
  std::int64_t layers = 0, heads = 0;
  std::int64_t sentences = 0, tokens = 0;
  std::vector<HeadStatistics> per_head;  // layer-major: [layer * heads + head]
};

// Runs the encoder over `sentences` (dynamic batching by length) and averages each head's row
// statistics over all valid query rows. Throws Error for an empty list.
HeadAnalysis analyze_heads(Context& ctx, const BertEncoder& encoder,
                           const std::vector<std::string>& sentences,
                           const HeadAnalysisOptions& options = {});

struct HeadAblationOptions {
  std::int64_t batch_size = 32;
  std::function<void(std::int64_t, std::int64_t)> progress;  // (evaluations done, total)
};

struct HeadAblation {
  std::int64_t pairs = 0;
  double baseline = 0;           // Spearman x100 with every head
  std::vector<double> spearman;  // [layer * heads + head]: with that head alone removed
  // Importance of a head: baseline - spearman (points of Spearman x100 lost without it).
  double importance(std::size_t index) const { return baseline - spearman[index]; }
};

// One STS evaluation with all heads, then one per head with that head's mask 0.
HeadAblation ablate_heads(Context& ctx, const BertEncoder& encoder,
                          const std::vector<StsPair>& pairs,
                          const HeadAblationOptions& options = {});

// Many heads can go (seed 003): remove the `counts[i]` least important heads of `ranking`
// together (head mask 0) and measure STS Spearman on `pairs`, ideally pairs the ranking was not
// measured on. counts in [0, layers * heads]; 0 is the unpruned model.
struct PruningPoint {
  std::int64_t heads_removed = 0;
  double spearman = 0;  // x 100
};
std::vector<PruningPoint> prune_least_important(Context& ctx, const BertEncoder& encoder,
                                                const HeadAblation& ranking,
                                                const std::vector<StsPair>& pairs,
                                                const std::vector<std::int64_t>& counts,
                                                const HeadAblationOptions& options = {});
// Head indices (layer * heads + head) by importance; ties keep index order.
std::vector<std::size_t> least_important_first(const HeadAblation& ranking);
std::vector<std::size_t> most_important_first(const HeadAblation& ranking);

// The head mask that removes the first `count` heads of `order` (layer * heads + head), skipping
// any that would remove its layer's last head (a pruned layer keeps at least one head). Error if
// `order` has fewer removable heads or count > layers * (heads - 1).
std::vector<float> removal_mask(const EncoderConfig& config, const std::vector<std::size_t>& order,
                                std::int64_t count);

// STS Spearman x100 on `pairs` under each head mask (the sentences tokenised and batched once;
// equal masks evaluated once).
std::vector<double> sts_spearman_for_masks(Context& ctx, const BertEncoder& encoder,
                                           const std::vector<StsPair>& pairs,
                                           const std::vector<std::vector<float>>& masks,
                                           const HeadAblationOptions& options = {});

// Iterative re-ranking: for each count in `counts` (ascending), every head still kept is
// ablated on top of the heads removed so far, and the least important are removed until
// `count` heads are gone (never a layer's last head). Returns the removal order; its first
// counts[i] entries are the heads removed at step i. Costs one ablation pass per step.
std::vector<std::size_t> iterative_removal_order(Context& ctx, const BertEncoder& encoder,
                                                 const std::vector<StsPair>& pairs,
                                                 const std::vector<std::int64_t>& counts,
                                                 const HeadAblationOptions& options = {});

// The reference kernel's per-head probabilities (double softmax of the same q, k, masks and
// scale) for the params an observe hook received, into `probs` [B, heads, q_len, kv_len]; the
// reference output goes to `scratch_out`, so the layer's own out and lse stay as its kernel
// wrote them.
void reference_probabilities(Context& ctx, const AttentionParams& params, const TensorView& probs,
                             std::vector<float>& scratch_out);

struct AttentionMaps {
  std::vector<std::string> tokens;  // [CLS] ... [SEP]
  std::int64_t layers = 0, heads = 0, n = 0;
  std::vector<float> probs;  // [layers, heads, n, n], from the reference kernel

  const float* map(std::int64_t layer, std::int64_t head) const {
    return probs.data() + (layer * heads + head) * n * n;
  }
};
AttentionMaps attention_maps(Context& ctx, const BertEncoder& encoder, const std::string& text);

}  // namespace headcount
