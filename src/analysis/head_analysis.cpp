// Per-head statistics over a corpus, head roles, and the attention maps of one sentence.
#include "headcount/head_analysis.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "headcount/error.h"
#include "headcount/head_stats.h"

namespace headcount {

using detail::concat;

namespace {

enum KeyClassBit : int { kClassCls = 0, kClassSep, kClassPunctuation, kKeyClasses };

// Per token: which of [CLS], [SEP], punctuation it is (bits of KeyClassBit); padding is none.
std::vector<std::uint8_t> key_classes(const WordPieceTokenizer& tokenizer,
                                      const TokenBatch& batch) {
  std::vector<std::uint8_t> classes(batch.ids.size(), 0);
  for (std::int64_t b = 0; b < batch.batch; ++b)
    for (std::int64_t j = 0; j < batch.lengths[static_cast<std::size_t>(b)]; ++j) {
      const std::size_t at = static_cast<std::size_t>(b * batch.seq_len + j);
      const std::int32_t id = batch.ids[at];
      if (id == tokenizer.cls_id()) classes[at] |= 1u << kClassCls;
      if (id == tokenizer.sep_id()) classes[at] |= 1u << kClassSep;
      if (tokenizer.is_punctuation_token(id)) classes[at] |= 1u << kClassPunctuation;
    }
  return classes;
}

// Sums of the row fields (and ln(visible)) of one head, over valid query rows.
struct HeadSums {
  std::vector<double> fields;
  double uniform_entropy = 0;
  std::int64_t rows = 0;
};

}  // namespace

void reference_probabilities(Context& ctx, const AttentionParams& params, const TensorView& probs,
                             std::vector<float>& scratch_out) {
  AttentionParams ref = params;
  const std::int64_t B = params.q.shape[0], n = params.q.shape[1], heads = params.q.shape[2],
                     dv = params.v.shape[3];
  scratch_out.resize(static_cast<std::size_t>(B * n * heads * dv));
  ref.out = TensorView::contiguous(scratch_out.data(), DType::f32, {B, n, heads, dv});
  ref.lse = {};
  ref.probs_mode = ProbsMode::per_head;
  ref.probs = probs;
  attention_reference(ctx, ref);
}

HeadAnalysis analyze_heads(Context& ctx, const BertEncoder& encoder,
                           const std::vector<std::string>& sentences,
                           const HeadAnalysisOptions& options) {
  check(!sentences.empty(), "sentences", "at least one sentence", "none");
  check(options.batch_size >= 1, "batch size", ">= 1", options.batch_size);
  const EncoderConfig& c = encoder.config();
  check_unpruned(c);
  const WordPieceTokenizer& tokenizer = encoder.tokenizer();
  const std::int64_t layers = c.layers, heads = c.heads, d = c.hidden_size;

  std::vector<std::vector<std::int32_t>> ids;
  ids.reserve(sentences.size());
  for (const std::string& s : sentences) ids.push_back(tokenizer.encode(s));

  RowStatsSpec spec{.offsets = {kHeadOffsets.begin(), kHeadOffsets.end()}, .classes = kKeyClasses};
  const std::int64_t fields = spec.fields();
  std::vector<HeadSums> sums(static_cast<std::size_t>(layers * heads));
  for (HeadSums& s : sums) s.fields.assign(static_cast<std::size_t>(fields), 0.0);

  HeadAnalysis result{
      .layers = layers, .heads = heads, .sentences = static_cast<std::int64_t>(sentences.size())};
  std::vector<double> row_stats;
  std::vector<float> hidden, probs, scratch_out;
  const std::int64_t count = static_cast<std::int64_t>(ids.size());
  std::int64_t done = 0;
  for (const LengthBatch& length_batch :
       batch_by_length(ids, options.batch_size, tokenizer.pad_id())) {
    const TokenBatch& batch = length_batch.tokens;
    const std::int64_t B = batch.batch, n = batch.seq_len;
    const std::vector<std::uint8_t> classes = key_classes(tokenizer, batch);
    spec.key_classes = classes;
    row_stats.resize(static_cast<std::size_t>(B * heads * n * fields));
    const TensorView stats_view =
        TensorView::contiguous(row_stats.data(), DType::f64, {B, heads, n, fields});

    auto observe = [&](std::int64_t layer, const AttentionParams& params) {
      if (options.stats_kernel == Kernel::streaming) {
        attention_row_stats(ctx, params, spec, stats_view);
      } else {
        probs.resize(static_cast<std::size_t>(B * heads * n * n));
        const TensorView probs_view =
            TensorView::contiguous(probs.data(), DType::f32, {B, heads, n, n});
        reference_probabilities(ctx, params, probs_view, scratch_out);
        attention_row_stats_from_probs(params, probs_view, spec, stats_view);
      }
      for (std::int64_t b = 0; b < B; ++b)
        for (std::int64_t h = 0; h < heads; ++h) {
          HeadSums& s = sums[static_cast<std::size_t>(layer * heads + h)];
          for (std::int64_t i = 0; i < batch.lengths[static_cast<std::size_t>(b)]; ++i) {
            const double* row = row_stats.data() + ((b * heads + h) * n + i) * fields;
            for (std::int64_t f = 0; f < fields; ++f)
              s.fields[static_cast<std::size_t>(f)] += row[f];
            s.uniform_entropy += std::log(std::max(row[kRowVisible], 1.0));
            ++s.rows;
          }
        }
    };
    hidden.resize(static_cast<std::size_t>(B * n * d));
    encoder.executor().forward(ctx, batch,
                               TensorView::contiguous(hidden.data(), DType::f32, {B, n, d}),
                               TransformerForwardOptions{.observe_attention = observe});
    for (std::int64_t len : batch.lengths) result.tokens += len;
    done += B;
    if (options.progress) options.progress(done, count);
  }

  for (std::int64_t l = 0; l < layers; ++l)
    for (std::int64_t h = 0; h < heads; ++h) {
      const HeadSums& s = sums[static_cast<std::size_t>(l * heads + h)];
      const double rows = static_cast<double>(s.rows);
      auto mean = [&](std::int64_t field) {
        return s.fields[static_cast<std::size_t>(field)] / rows;
      };
      HeadStatistics stats{.layer = l, .head = h, .rows = s.rows};
      for (std::size_t o = 0; o < kHeadOffsets.size(); ++o)
        stats.offsets[o] = mean(spec.offset_field(o));
      stats.cls = mean(spec.class_field(kClassCls));
      stats.sep = mean(spec.class_field(kClassSep));
      stats.punctuation = mean(spec.class_field(kClassPunctuation));
      stats.entropy = mean(kRowEntropy);
      stats.uniform_entropy = s.uniform_entropy / rows;
      stats.distance = mean(kRowDistance);
      stats.mass = mean(kRowMass);
      stats.role = assign_role(stats);
      result.per_head.push_back(stats);
    }
  return result;
}

namespace {

struct Target {
  HeadRole role;
  double share;
  std::string label;
};

Target dominant_target(const HeadStatistics& s) {
  Target best{HeadRole::mixed, -1.0, ""};
  auto consider = [&](HeadRole role, double share, std::string label) {
    if (share > best.share) best = {role, share, std::move(label)};
  };
  for (std::size_t o = 0; o < kHeadOffsets.size(); ++o) {
    const std::int64_t offset = kHeadOffsets[o];
    const HeadRole role = offset == -1  ? HeadRole::previous_token
                          : offset == 0 ? HeadRole::self
                          : offset == 1 ? HeadRole::next_token
                                        : HeadRole::positional;
    consider(role, s.offsets[o],
             offset == -1  ? "prev"
             : offset == 0 ? "self"
             : offset == 1 ? "next"
                           : concat(offset > 0 ? "+" : "", offset));
  }
  consider(HeadRole::cls_sink, s.cls, "[CLS]");
  consider(HeadRole::sep_sink, s.sep, "[SEP]");
  consider(HeadRole::punctuation, s.punctuation, "punct");
  return best;
}

}  // namespace

HeadRole assign_role(const HeadStatistics& head) {
  const Target target = dominant_target(head);
  if (target.share >= kRoleTargetShare) return target.role;
  if (head.normalized_entropy() >= kRoleBroadEntropy) return HeadRole::broad;
  return HeadRole::mixed;
}

std::string role_target(const HeadStatistics& head) {
  const Target target = dominant_target(head);
  char share[16];
  std::snprintf(share, sizeof share, "%.2f", target.share);
  return concat(target.label, ' ', share);
}

const char* role_name(HeadRole role) {
  switch (role) {
    case HeadRole::previous_token:
      return "previous-token";
    case HeadRole::self:
      return "self";
    case HeadRole::next_token:
      return "next-token";
    case HeadRole::positional:
      return "positional";
    case HeadRole::cls_sink:
      return "[CLS] sink";
    case HeadRole::sep_sink:
      return "[SEP] sink";
    case HeadRole::punctuation:
      return "punctuation";
    case HeadRole::broad:
      return "broad";
    case HeadRole::mixed:
      return "mixed";
  }
  return "mixed";
}

const char* role_rule(HeadRole role) {
  switch (role) {
    case HeadRole::previous_token:
      return ">= 50% of attention on the previous token (i-1)";
    case HeadRole::self:
      return ">= 50% of attention on the token itself";
    case HeadRole::next_token:
      return ">= 50% of attention on the next token (i+1)";
    case HeadRole::positional:
      return ">= 50% of attention on one fixed offset (i+-2, i+-3)";
    case HeadRole::cls_sink:
      return ">= 50% of attention on [CLS]";
    case HeadRole::sep_sink:
      return ">= 50% of attention on [SEP]";
    case HeadRole::punctuation:
      return ">= 50% of attention on punctuation tokens";
    case HeadRole::broad:
      return "no target >= 50%, entropy >= 90% of the uniform row's";
    case HeadRole::mixed:
      return "no target >= 50%, entropy < 90% of the uniform row's";
  }
  return "";
}

void check_unpruned(const EncoderConfig& c) {
  check(!c.is_pruned(), "model",
        detail::concat("every layer with all ", c.heads,
                       " heads (the analyses index heads as layer x heads)"),
        "a pruned model");
}

AttentionMaps attention_maps(Context& ctx, const BertEncoder& encoder, const std::string& text) {
  const EncoderConfig& c = encoder.config();
  check_unpruned(c);
  const WordPieceTokenizer& tokenizer = encoder.tokenizer();
  const std::vector<std::int32_t> ids = tokenizer.encode(text);
  const TokenBatch batch = pad_batch({ids}, tokenizer.pad_id());
  AttentionMaps maps{.layers = c.layers, .heads = c.heads, .n = batch.seq_len};
  for (std::int32_t id : ids) maps.tokens.push_back(tokenizer.token(id));
  const std::int64_t n = maps.n, heads = c.heads;
  maps.probs.assign(static_cast<std::size_t>(c.layers * heads * n * n), 0.0f);
  std::vector<float> scratch_out;
  auto observe = [&](std::int64_t layer, const AttentionParams& params) {
    reference_probabilities(ctx, params,
                            TensorView::contiguous(maps.probs.data() + layer * heads * n * n,
                                                   DType::f32, {1, heads, n, n}),
                            scratch_out);
  };
  std::vector<float> hidden(static_cast<std::size_t>(n * c.hidden_size));
  encoder.executor().forward(
      ctx, batch, TensorView::contiguous(hidden.data(), DType::f32, {1, n, c.hidden_size}),
      TransformerForwardOptions{.observe_attention = observe});
  return maps;
}

}  // namespace headcount
