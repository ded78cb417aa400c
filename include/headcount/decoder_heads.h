// What the heads of a Llama-family decoder do (SmolLM2-135M: 30 layers of 9 query heads over 3
// K/V heads), measured through LlamaDecoder's observe hook (DecoderForwardOptions):
//   decoder_corpus_statistics  per head, over windows of real text: attention to the previous
//                              token, to itself, to position 0 (the sink), entropy, distance
//   decoder_induction_scores   per head, on repeated random token sequences (Olsson et al. 2022,
//                              "In-context Learning and Induction Heads"): the prefix-matching
//                              score and the copying score; and the in-context loss drop
//   analyze_decoder_heads      both, and a role per head by the rule of assign_decoder_role
//   decoder_attention_maps     every head's probabilities for one prompt (heatmaps)
// docs/decoder-heads.md states the measures and the role rule, and the results on SmolLM2.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "headcount/context.h"
#include "headcount/decoder.h"
#include "headcount/head_analysis.h"
#include "headcount/model.h"

namespace headcount {

// ---- Corpus statistics ---------------------------------------------------------------------

struct DecoderCorpusOptions {
  std::int64_t context = 256;     // tokens per window, >= 2 and <= the model's context
  std::int64_t max_windows = 32;  // windows taken back to back from the start; 0: all
  std::function<void(std::int64_t, std::int64_t)> progress;  // (windows done, total)
};

// One head's means over every query row i >= 1 of every window (row 0 sees only itself).
struct DecoderCorpusStats {
  std::int64_t rows = 0;
  double previous = 0;         // attention to i - 1
  double self = 0;             // attention to i
  double first = 0;            // attention to position 0 of the window (the "sink")
  double entropy = 0;          // nats
  double uniform_entropy = 0;  // mean ln(i + 1): a uniform causal row's entropy
  double distance = 0;         // mean (i - j), tokens
  double mass = 0;             // sum of the row's probabilities (1: a check)
  double normalized_entropy() const {
    return uniform_entropy > 0 ? entropy / uniform_entropy : 0.0;
  }
};

struct DecoderCorpusResult {
  std::int64_t windows = 0, context = 0;
  std::vector<DecoderCorpusStats> per_head;  // [layer * heads + head]
};

// Windows of `context` tokens of `ids` taken back to back (a last partial window is dropped),
// each run from a fresh cache as LlamaDecoder::perplexity runs them (no BOS put in front); the
// row statistics by the streaming kernel's second pass over its log-sum-exp
// (attention_row_stats). Error: fewer than `context` tokens, a bad option, or a model whose
// layers differ in head count.
DecoderCorpusResult decoder_corpus_statistics(Context& ctx, const LlamaDecoder& decoder,
                                              std::span<const std::int32_t> ids,
                                              const DecoderCorpusOptions& options = {});

// ---- Induction ------------------------------------------------------------------------------

struct InductionOptions {
  std::int64_t sequences = 16;  // repeated random sequences, >= 1
  std::int64_t length = 64;     // random tokens per copy, >= 2
  std::uint64_t seed = 0;       // std::mt19937_64; the token of a draw is candidates[r % count]
  std::function<void(std::int64_t, std::int64_t)> progress;  // (sequences done, total)
};

// `sequences` sequences [BOS?, r_1 .. r_L, r_1 .. r_L]: the tokenizer's BOS first when it has
// one, then L tokens drawn uniformly (with replacement) from the vocabulary's normal tokens
// (TokenType::normal: no control, byte or unused tokens), then the same L again.
std::vector<std::vector<std::int32_t>> repeated_random_sequences(const BpeTokenizer& tokenizer,
                                                                 const InductionOptions& options);

// The copying score's arithmetic: how much the OV circuit of head h of layer l raises a token's
// logit, read directly (the path W_U · diag(g) · W_O,h · v of the head's output to the logits,
// with g the final RMSNorm's weight; the norm's 1/rms factor is left out, which the z-score
// below does not see). For a value vector v (the head's K/V group's V row at the attended
// position, as the kernel read it) the direct logits are l = W_U diag(g) W_O,h v over the
// vocabulary, and the score of token t is the z-score (l_t - mean(l)) / std(l): > 0 when the
// head's output pushes the logits towards the token it attends to. mean and std over the
// vocabulary come from the Gram matrix W_U^T W_U (in double, once), so no vocabulary-wide logit
// vector is formed per position.
class OvCopyingCircuit {
 public:
  // From the decoder's weights (Family::llama; every layer with the same head counts): about
  // layers x d_model^3 + vocab x d_model^2 / 2 multiply-adds in double (SmolLM2: ~14 G).
  OvCopyingCircuit(Context& ctx, const model::Weights& weights);
  // values: f32 [n, kv_heads, head_dim] (strided; the V rows of the attended positions) and
  // tokens[n] their tokens; out [heads * n], head-major: z-score of tokens[i] for head h.
  void z_scores(Context& ctx, std::int64_t layer, std::span<const std::int32_t> tokens,
                const TensorView& values, std::span<double> out) const;

 private:
  std::int64_t layers_ = 0, heads_ = 0, kv_heads_ = 0, head_dim_ = 0, d_model_ = 0, vocab_ = 0;
  // With U = W_U diag(g) (row u_t per token), l_t = u_t . (W_O,h v) = c_t,h . v, where
  // c_t,h = W_O,h^T u_t is row t of U · W_O (one GEMM per call), and over the vocabulary
  // mean(l) = m_h . v and mean(l^2) = v^T S_h v with m_h = W_O,h^T mean_t(u_t) and
  // S_h = W_O,h^T (U^T U / vocab) W_O,h, both from the weights alone.
  std::vector<float> unembedding_;  // U [vocab, d_model]
  std::vector<Tensor> packed_o_;    // per layer: W_O (PyTorch [d_model, heads * head_dim]) packed
  std::vector<double> mean_;        // m: [layers, heads, head_dim]
  std::vector<double> second_;      // S: [layers, heads, head_dim, head_dim]
};

struct InductionHeadScores {
  double prefix_matching = 0;  // mean attention from each second-copy token to the token after
                               // its earlier occurrence (position p to p - L + 1)
  double copying = 0;          // mean OvCopyingCircuit z-score of those attended tokens
};

struct InductionResult {
  std::int64_t sequences = 0, length = 0;
  std::uint64_t seed = 0;
  bool bos = false;  // whether the sequences start with the tokenizer's BOS
  // Mean next-token loss (nats) on the tokens of the first copy (those with a token before
  // them) and on the tokens of the second copy; the in-context loss drop is their difference.
  double loss_first_copy = 0, loss_second_copy = 0;
  double loss_drop() const { return loss_first_copy - loss_second_copy; }
  std::vector<InductionHeadScores> per_head;  // [layer * heads + head]
};

// The in-context loss alone (no per-head scores): the mean next-token loss on the first and the
// second copy of repeated_random_sequences, one prefill each, as decoder_induction_scores
// computes them. Any head layout (a pruned model too).
struct InContextLoss {
  double first_copy = 0, second_copy = 0;
  double drop() const { return first_copy - second_copy; }
};
InContextLoss decoder_in_context_loss(Context& ctx, const LlamaDecoder& decoder,
                                      const InductionOptions& options = {});

// One prefill of each sequence of repeated_random_sequences, the probabilities of every head
// from the reference kernel on the rotated q, k the streaming kernel used (observe hook).
InductionResult decoder_induction_scores(Context& ctx, const LlamaDecoder& decoder,
                                         const OvCopyingCircuit& circuit,
                                         const InductionOptions& options = {});

// ---- Roles -----------------------------------------------------------------------------------

enum class DecoderHeadRole { induction, previous_token, sink, self, broad, mixed };
inline constexpr std::array<DecoderHeadRole, 6> kAllDecoderHeadRoles = {
    DecoderHeadRole::induction, DecoderHeadRole::previous_token, DecoderHeadRole::sink,
    DecoderHeadRole::self,      DecoderHeadRole::broad,          DecoderHeadRole::mixed};

// The rule, fixed before it was run on a model (docs/decoder-heads.md), first match wins:
//   1. induction       prefix_matching >= 0.3 and copying > 0
//   2. previous-token  corpus attention to i - 1 >= 0.5
//   3. sink            corpus attention to position 0 >= 0.5
//   4. self            corpus attention to i >= 0.5
//   5. broad           corpus entropy >= 0.9 of the uniform causal row's
//   6. mixed           none of these
inline constexpr double kInductionPrefixMatching = 0.3;
inline constexpr double kInductionCopying = 0.0;
inline constexpr double kDecoderRoleShare = 0.5;
inline constexpr double kDecoderRoleBroadEntropy = 0.9;

struct DecoderHeadScores {
  std::int64_t layer = 0, head = 0;
  DecoderCorpusStats corpus;
  InductionHeadScores induction;
  DecoderHeadRole role = DecoderHeadRole::mixed;
};

DecoderHeadRole assign_decoder_role(const DecoderCorpusStats& corpus,
                                    const InductionHeadScores& induction);
const char* decoder_role_name(DecoderHeadRole role);  // "induction", "previous-token", ...
const char* decoder_role_rule(DecoderHeadRole role);  // the rule, for legends

struct DecoderHeadAnalysis {
  std::int64_t layers = 0, heads = 0, kv_heads = 0;
  DecoderCorpusResult corpus;
  InductionResult induction;
  std::vector<DecoderHeadScores> per_head;  // [layer * heads + head]
  double corpus_seconds = 0, induction_seconds = 0;
};

DecoderHeadAnalysis analyze_decoder_heads(Context& ctx, const LlamaDecoder& decoder,
                                          const OvCopyingCircuit& circuit,
                                          std::span<const std::int32_t> corpus_ids,
                                          const DecoderCorpusOptions& corpus_options = {},
                                          const InductionOptions& induction_options = {});

// Every head's probabilities for one prompt (prefill from an empty cache), from the reference
// kernel on the q, k the streaming kernel used: probs [layers, heads, n, n], zero above the
// diagonal; tokens are the tokenizer's token texts.
AttentionMaps decoder_attention_maps(Context& ctx, const LlamaDecoder& decoder,
                                     std::span<const std::int32_t> ids);

}  // namespace headcount
