// What a decoder's heads do: corpus statistics, induction scores, the OV copying circuit, roles
// and one prompt's attention maps (decoder_heads.h).
#include "headcount/decoder_heads.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

#include "headcount/error.h"
#include "headcount/head_stats.h"
#include "layers/packed_gemm.h"

namespace headcount {

using detail::concat;
using i64 = std::int64_t;

namespace {

// The analyses index heads as layer * heads + head: every layer must have the same count.
i64 uniform_heads(const model::Config& c, const char* what) {
  for (i64 l = 1; l < c.layer_count(); ++l)
    check(c.heads_in(l) == c.heads_in(0), concat(what, ": layer ", l, " heads"),
          concat(c.heads_in(0), ", as layer 0 (the analyses index heads as layer x heads)"),
          c.heads_in(l));
  return c.heads_in(0);
}

double row_nll(const float* row, i64 vocab, std::int32_t target) {
  const double max = *std::max_element(row, row + vocab);
  double sum = 0;
  for (i64 v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - max);
  return max + std::log(sum) - row[target];
}

}  // namespace

// ---- Corpus statistics ---------------------------------------------------------------------

DecoderCorpusResult decoder_corpus_statistics(Context& ctx, const LlamaDecoder& decoder,
                                              std::span<const std::int32_t> ids,
                                              const DecoderCorpusOptions& options) {
  const model::Config& c = decoder.config();
  const i64 heads = uniform_heads(c, "model"), layers = c.layer_count();
  const i64 n = options.context;
  check(n >= 2 && n <= c.context, "context", concat("2 to the model's context ", c.context), n);
  check(options.max_windows >= 0, "max windows", ">= 0 (0: all)", options.max_windows);
  i64 windows = static_cast<i64>(ids.size()) / n;
  check(windows >= 1, "corpus", concat("at least ", n, " tokens (one window)"),
        concat(ids.size(), " tokens"));
  if (options.max_windows > 0) windows = std::min(windows, options.max_windows);

  // Offsets -1 (previous token) and 0 (itself); key class 0: position 0.
  std::vector<std::uint8_t> first_key(static_cast<std::size_t>(n), 0);
  first_key[0] = 1;
  const RowStatsSpec spec{.offsets = {-1, 0}, .key_classes = first_key, .classes = 1};
  const i64 fields = spec.fields();
  std::vector<double> row_stats(static_cast<std::size_t>(heads * n * fields));
  const TensorView stats_view =
      TensorView::contiguous(row_stats.data(), DType::f64, {1, heads, n, fields});
  // Per head: the fields summed over rows 1..n-1, then ln(visible) summed.
  std::vector<double> sums(static_cast<std::size_t>(layers * heads * (fields + 1)), 0.0);

  auto observe = [&](i64 layer, const AttentionParams& params) {
    attention_row_stats(ctx, params, spec, stats_view);
    for (i64 h = 0; h < heads; ++h) {
      double* s = sums.data() + (layer * heads + h) * (fields + 1);
      for (i64 i = 1; i < n; ++i) {
        const double* row = row_stats.data() + (h * n + i) * fields;
        for (i64 f = 0; f < fields; ++f) s[f] += row[f];
        s[fields] += std::log(row[kRowVisible]);
      }
    }
  };
  KvCache cache = decoder.make_cache(n);
  for (i64 w = 0; w < windows; ++w) {
    cache.reset();
    (void)decoder.executor().forward(
        ctx, ids.subspan(static_cast<std::size_t>(w * n), static_cast<std::size_t>(n)), cache,
        Logits::last, {.observe_attention = observe});
    if (options.progress) options.progress(w + 1, windows);
  }

  DecoderCorpusResult result{.windows = windows, .context = n};
  const i64 rows = windows * (n - 1);
  for (i64 k = 0; k < layers * heads; ++k) {
    const double* s = sums.data() + k * (fields + 1);
    const double r = static_cast<double>(rows);
    result.per_head.push_back({.rows = rows,
                               .previous = s[spec.offset_field(0)] / r,
                               .self = s[spec.offset_field(1)] / r,
                               .first = s[spec.class_field(0)] / r,
                               .entropy = s[kRowEntropy] / r,
                               .uniform_entropy = s[fields] / r,
                               .distance = s[kRowDistance] / r,
                               .mass = s[kRowMass] / r});
  }
  return result;
}

// ---- The OV copying circuit -----------------------------------------------------------------

OvCopyingCircuit::OvCopyingCircuit(Context& ctx, const model::Weights& weights) {
  const model::Config& c = weights.config;
  check(c.family == model::Family::llama, "copying circuit weights family", "llama",
        model::family_name(c.family));
  layers_ = c.layer_count();
  heads_ = uniform_heads(c, "copying circuit weights");
  kv_heads_ = c.kv_heads_in(0);
  head_dim_ = c.head_dim;
  d_model_ = c.d_model;
  vocab_ = c.vocab;
  const i64 d = d_model_, width = heads_ * head_dim_;
  using model::Role;
  const Tensor& w_u =
      weights.at(c.output == model::Output::tied ? Role::token_embedding : Role::lm_head_weight);
  const float* g = weights.at(Role::final_norm_weight).data<const float>();
  unembedding_.resize(static_cast<std::size_t>(vocab_ * d));
  for (i64 t = 0; t < vocab_; ++t)
    for (i64 i = 0; i < d; ++i) unembedding_[t * d + i] = w_u.data<const float>()[t * d + i] * g[i];

  // U^T U / vocab and mean_t(u_t) in double: a fixed number of vocabulary chunks, each summed
  // by one task in token order, then the chunks in order (the same bits on any thread count).
  constexpr i64 kChunks = 8;
  std::vector<double> chunk_gram(static_cast<std::size_t>(kChunks * d * d), 0.0);
  ctx.parallel_for(kChunks, [&](i64 chunk, int) {
    double* gram = chunk_gram.data() + chunk * d * d;
    std::vector<double> u(static_cast<std::size_t>(d));
    for (i64 t = chunk * vocab_ / kChunks; t < (chunk + 1) * vocab_ / kChunks; ++t) {
      for (i64 i = 0; i < d; ++i) u[static_cast<std::size_t>(i)] = unembedding_[t * d + i];
      for (i64 i = 0; i < d; ++i) {
        const double ui = u[static_cast<std::size_t>(i)];
        double* row = gram + i * d;
        for (i64 j = i; j < d; ++j) row[j] += ui * u[static_cast<std::size_t>(j)];
      }
    }
  });
  std::vector<double> gram(static_cast<std::size_t>(d * d), 0.0),
      mean_u(static_cast<std::size_t>(d), 0.0);
  for (i64 chunk = 0; chunk < kChunks; ++chunk)
    for (i64 i = 0; i < d; ++i)
      for (i64 j = i; j < d; ++j) gram[i * d + j] += chunk_gram[(chunk * d + i) * d + j];
  for (i64 i = 0; i < d; ++i)
    for (i64 j = i; j < d; ++j) {
      gram[i * d + j] /= static_cast<double>(vocab_);
      gram[j * d + i] = gram[i * d + j];
    }
  for (i64 t = 0; t < vocab_; ++t)
    for (i64 i = 0; i < d; ++i) mean_u[i] += unembedding_[t * d + i];
  for (double& m : mean_u) m /= static_cast<double>(vocab_);

  // Per layer: T = gram · W_O, then m_h = W_O,h^T mean_u and S_h = W_O,h^T T_h.
  mean_.assign(static_cast<std::size_t>(layers_ * heads_ * head_dim_), 0.0);
  second_.assign(static_cast<std::size_t>(layers_ * heads_ * head_dim_ * head_dim_), 0.0);
  std::vector<double> w_o(static_cast<std::size_t>(d * width)), t_o(w_o.size());
  for (i64 l = 0; l < layers_; ++l) {
    const Tensor& o = weights.at(Role::o_weight, l);  // [d_model, heads * head_dim]
    packed_o_.push_back(layers::pack_weights(o.data<const float>(), d, width, width));
    std::copy_n(o.data<const float>(), d * width, w_o.begin());
    ctx.parallel_for(d, [&](i64 i, int) {
      double* out = t_o.data() + i * width;
      std::fill_n(out, width, 0.0);
      for (i64 k = 0; k < d; ++k) {
        const double gik = gram[i * d + k];
        const double* w = w_o.data() + k * width;
        for (i64 j = 0; j < width; ++j) out[j] += gik * w[j];
      }
    });
    for (i64 h = 0; h < heads_; ++h) {
      double* m = mean_.data() + (l * heads_ + h) * head_dim_;
      double* s = second_.data() + (l * heads_ + h) * head_dim_ * head_dim_;
      for (i64 i = 0; i < d; ++i) {
        const double* w = w_o.data() + i * width + h * head_dim_;
        const double* t = t_o.data() + i * width + h * head_dim_;
        for (i64 a = 0; a < head_dim_; ++a) {
          m[a] += w[a] * mean_u[static_cast<std::size_t>(i)];
          for (i64 b = 0; b < head_dim_; ++b) s[a * head_dim_ + b] += w[a] * t[b];
        }
      }
    }
  }
}

void OvCopyingCircuit::z_scores(Context& ctx, i64 layer, std::span<const std::int32_t> tokens,
                                const TensorView& values, std::span<double> out) const {
  const i64 n = static_cast<i64>(tokens.size()), d = d_model_, width = heads_ * head_dim_;
  check(layer >= 0 && layer < layers_, "copying layer", concat("0 to ", layers_ - 1), layer);
  check(values.rank == 3 && values.dtype == DType::f32 && values.shape[0] == n &&
            values.shape[1] == kv_heads_ && values.shape[2] == head_dim_ && values.strides[2] == 1,
        "copying values", concat("f32 [", n, ", ", kv_heads_, ", ", head_dim_, "], unit stride"),
        concat(dtype_name(values.dtype), ' ', values.shape_string()));
  check(static_cast<i64>(out.size()) == heads_ * n, "copying out",
        concat(heads_ * n, " scores (heads x tokens)"), out.size());
  for (std::size_t i = 0; i < tokens.size(); ++i)
    check(tokens[i] >= 0 && tokens[i] < vocab_, concat("copying tokens[", i, "]"),
          concat("in [0, ", vocab_, ")"), tokens[i]);
  if (n == 0) return;
  // c_t,h for every token: the rows u_t times W_O (one GEMM, [n, d] x [d, heads * head_dim]).
  std::vector<float> x(static_cast<std::size_t>(n * d)),
      logit_rows(static_cast<std::size_t>(n * width));
  for (i64 i = 0; i < n; ++i)
    std::copy_n(unembedding_.data() + static_cast<i64>(tokens[i]) * d, d, x.data() + i * d);
  layers::packed_gemm(ctx, {.m = n,
                            .x = x.data(),
                            .ldx = d,
                            .w = &packed_o_[static_cast<std::size_t>(layer)],
                            .n = width,
                            .y = logit_rows.data(),
                            .ldy = width});
  const i64 group = heads_ / kv_heads_;
  for (i64 h = 0; h < heads_; ++h) {
    const double* m = mean_.data() + (layer * heads_ + h) * head_dim_;
    const double* s = second_.data() + (layer * heads_ + h) * head_dim_ * head_dim_;
    for (i64 i = 0; i < n; ++i) {
      const float* v = values.ptr<const float>() + values.offset({i, h / group, 0});
      const float* ct = logit_rows.data() + i * width + h * head_dim_;
      double logit = 0, mean = 0, second = 0;
      for (i64 a = 0; a < head_dim_; ++a) {
        logit += static_cast<double>(ct[a]) * v[a];
        mean += m[a] * v[a];
        double sa = 0;
        for (i64 b = 0; b < head_dim_; ++b) sa += s[a * head_dim_ + b] * v[b];
        second += sa * v[a];
      }
      const double variance = second - mean * mean;
      // A zero value vector moves no logit: its score is 0, not 0/0.
      out[static_cast<std::size_t>(h * n + i)] =
          variance > 0 ? (logit - mean) / std::sqrt(variance) : 0.0;
    }
  }
}

// ---- Induction ------------------------------------------------------------------------------

std::vector<std::vector<std::int32_t>> repeated_random_sequences(const BpeTokenizer& tokenizer,
                                                                 const InductionOptions& options) {
  check(options.sequences >= 1, "sequences", ">= 1", options.sequences);
  check(options.length >= 2, "sequence length", ">= 2 random tokens per copy", options.length);
  std::vector<std::int32_t> candidates;
  for (i64 id = 0; id < tokenizer.vocab_size(); ++id)
    if (tokenizer.token_type(static_cast<std::int32_t>(id)) == TokenType::normal)
      candidates.push_back(static_cast<std::int32_t>(id));
  check(!candidates.empty(), "tokenizer", "at least one normal token to draw", "none");
  std::mt19937_64 rng(options.seed);
  std::vector<std::vector<std::int32_t>> out;
  for (i64 s = 0; s < options.sequences; ++s) {
    std::vector<std::int32_t> seq;
    if (tokenizer.bos_id() >= 0) seq.push_back(tokenizer.bos_id());
    const std::size_t start = seq.size();
    for (i64 i = 0; i < options.length; ++i) seq.push_back(candidates[rng() % candidates.size()]);
    for (i64 i = 0; i < options.length; ++i)
      seq.push_back(seq[start + static_cast<std::size_t>(i)]);
    out.push_back(std::move(seq));
  }
  return out;
}

namespace {

// Position p's logits predict token p + 1. The first copy's tokens bos .. bos + L - 1 that have
// a token before them; the second copy's bos + L .. bos + 2L - 1.
void add_copy_losses(const Tensor& logits, const std::vector<std::int32_t>& seq, i64 bos, i64 L,
                     i64 vocab, double& loss_first, i64& first_count, double& loss_second) {
  for (i64 t = std::max<i64>(bos, 1); t < bos + 2 * L; ++t) {
    const double nll = row_nll(logits.data<const float>() + (t - 1) * vocab, vocab,
                               seq[static_cast<std::size_t>(t)]);
    if (t < bos + L) {
      loss_first += nll;
      ++first_count;
    } else {
      loss_second += nll;
    }
  }
}

}  // namespace

InContextLoss decoder_in_context_loss(Context& ctx, const LlamaDecoder& decoder,
                                      const InductionOptions& options) {
  const model::Config& c = decoder.config();
  const i64 L = options.length;
  const std::vector<std::vector<std::int32_t>> sequences =
      repeated_random_sequences(decoder.tokenizer(), options);
  const i64 n = static_cast<i64>(sequences[0].size()), bos = n - 2 * L;
  check(n <= c.context, "sequence length",
        concat("2 x length", bos ? " + BOS" : "", " <= the model's context ", c.context), n);
  KvCache cache = decoder.make_cache(n);
  double loss_first = 0, loss_second = 0;
  i64 first_count = 0;
  for (const std::vector<std::int32_t>& seq : sequences) {
    cache.reset();
    add_copy_losses(decoder.executor().forward(ctx, seq, cache, Logits::all), seq, bos, L, c.vocab,
                    loss_first, first_count, loss_second);
  }
  return {.first_copy = loss_first / static_cast<double>(first_count),
          .second_copy =
              loss_second / (static_cast<double>(options.sequences) * static_cast<double>(L))};
}

InductionResult decoder_induction_scores(Context& ctx, const LlamaDecoder& decoder,
                                         const OvCopyingCircuit& circuit,
                                         const InductionOptions& options) {
  const model::Config& c = decoder.config();
  const i64 heads = uniform_heads(c, "model"), layers = c.layer_count(), L = options.length;
  const std::vector<std::vector<std::int32_t>> sequences =
      repeated_random_sequences(decoder.tokenizer(), options);
  const i64 n = static_cast<i64>(sequences[0].size()), bos = n - 2 * L;
  check(n <= c.context, "sequence length",
        concat("2 x length", bos ? " + BOS" : "", " <= the model's context ", c.context), n);
  InductionResult result{
      .sequences = options.sequences, .length = L, .seed = options.seed, .bos = bos == 1};
  std::vector<double> prefix(static_cast<std::size_t>(layers * heads), 0.0),
      copying(prefix.size(), 0.0), z(static_cast<std::size_t>(heads * L));
  std::vector<float> probs(static_cast<std::size_t>(heads * n * n)), scratch;
  const TensorView probs_view = TensorView::contiguous(probs.data(), DType::f32, {1, heads, n, n});
  KvCache cache = decoder.make_cache(n);
  double loss_first = 0, loss_second = 0;
  i64 first_count = 0;
  for (i64 q = 0; q < options.sequences; ++q) {
    const std::vector<std::int32_t>& seq = sequences[static_cast<std::size_t>(q)];
    // Second-copy rows p = bos + L .. bos + 2L - 1 attend, when they induct, to p - L + 1: the
    // token after their earlier occurrence, positions bos + 1 .. bos + L.
    const std::span<const std::int32_t> attended(seq.data() + bos + 1, static_cast<std::size_t>(L));
    auto observe = [&](i64 layer, const AttentionParams& params) {
      reference_probabilities(ctx, params, probs_view, scratch);
      for (i64 h = 0; h < heads; ++h) {
        double sum = 0;
        for (i64 p = bos + L; p < bos + 2 * L; ++p) sum += probs[(h * n + p) * n + (p - L + 1)];
        prefix[static_cast<std::size_t>(layer * heads + h)] += sum / static_cast<double>(L);
      }
      const TensorView& v = params.v;  // [1, n, kv_heads, head_dim]
      const TensorView values = TensorView::strided(v.ptr<float>() + (bos + 1) * v.strides[1],
                                                    DType::f32, {L, v.shape[2], v.shape[3]},
                                                    {v.strides[1], v.strides[2], v.strides[3]});
      circuit.z_scores(ctx, layer, attended, values, z);
      for (i64 h = 0; h < heads; ++h) {
        double sum = 0;
        for (i64 i = 0; i < L; ++i) sum += z[static_cast<std::size_t>(h * L + i)];
        copying[static_cast<std::size_t>(layer * heads + h)] += sum / static_cast<double>(L);
      }
    };
    cache.reset();
    const Tensor logits =
        decoder.executor().forward(ctx, seq, cache, Logits::all, {.observe_attention = observe});
    add_copy_losses(logits, seq, bos, L, c.vocab, loss_first, first_count, loss_second);
    if (options.progress) options.progress(q + 1, options.sequences);
  }
  const double count = static_cast<double>(options.sequences);
  result.loss_first_copy = loss_first / static_cast<double>(first_count);
  result.loss_second_copy = loss_second / (count * static_cast<double>(L));
  for (std::size_t k = 0; k < prefix.size(); ++k)
    result.per_head.push_back(
        {.prefix_matching = prefix[k] / count, .copying = copying[k] / count});
  return result;
}

// ---- Roles -----------------------------------------------------------------------------------

DecoderHeadRole assign_decoder_role(const DecoderCorpusStats& corpus,
                                    const InductionHeadScores& induction) {
  if (induction.prefix_matching >= kInductionPrefixMatching &&
      induction.copying > kInductionCopying)
    return DecoderHeadRole::induction;
  if (corpus.previous >= kDecoderRoleShare) return DecoderHeadRole::previous_token;
  if (corpus.first >= kDecoderRoleShare) return DecoderHeadRole::sink;
  if (corpus.self >= kDecoderRoleShare) return DecoderHeadRole::self;
  if (corpus.normalized_entropy() >= kDecoderRoleBroadEntropy) return DecoderHeadRole::broad;
  return DecoderHeadRole::mixed;
}

const char* decoder_role_name(DecoderHeadRole role) {
  switch (role) {
    case DecoderHeadRole::induction:
      return "induction";
    case DecoderHeadRole::previous_token:
      return "previous-token";
    case DecoderHeadRole::sink:
      return "sink";
    case DecoderHeadRole::self:
      return "self";
    case DecoderHeadRole::broad:
      return "broad";
    case DecoderHeadRole::mixed:
      return "mixed";
  }
  return "mixed";
}

const char* decoder_role_rule(DecoderHeadRole role) {
  switch (role) {
    case DecoderHeadRole::induction:
      return "prefix-matching >= 0.3 on repeated random tokens and copying score > 0";
    case DecoderHeadRole::previous_token:
      return ">= 50% of attention on the previous token (i-1) over the corpus";
    case DecoderHeadRole::sink:
      return ">= 50% of attention on position 0 over the corpus";
    case DecoderHeadRole::self:
      return ">= 50% of attention on the token itself over the corpus";
    case DecoderHeadRole::broad:
      return "entropy >= 90% of the uniform causal row's";
    case DecoderHeadRole::mixed:
      return "none of the above";
  }
  return "";
}

DecoderHeadAnalysis analyze_decoder_heads(Context& ctx, const LlamaDecoder& decoder,
                                          const OvCopyingCircuit& circuit,
                                          std::span<const std::int32_t> corpus_ids,
                                          const DecoderCorpusOptions& corpus_options,
                                          const InductionOptions& induction_options) {
  const model::Config& c = decoder.config();
  DecoderHeadAnalysis a{
      .layers = c.layer_count(), .heads = uniform_heads(c, "model"), .kv_heads = c.kv_heads_in(0)};
  using clock = std::chrono::steady_clock;
  auto start = clock::now();
  a.corpus = decoder_corpus_statistics(ctx, decoder, corpus_ids, corpus_options);
  a.corpus_seconds = std::chrono::duration<double>(clock::now() - start).count();
  start = clock::now();
  a.induction = decoder_induction_scores(ctx, decoder, circuit, induction_options);
  a.induction_seconds = std::chrono::duration<double>(clock::now() - start).count();
  for (i64 l = 0; l < a.layers; ++l)
    for (i64 h = 0; h < a.heads; ++h) {
      const std::size_t k = static_cast<std::size_t>(l * a.heads + h);
      a.per_head.push_back(
          {.layer = l,
           .head = h,
           .corpus = a.corpus.per_head[k],
           .induction = a.induction.per_head[k],
           .role = assign_decoder_role(a.corpus.per_head[k], a.induction.per_head[k])});
    }
  return a;
}

AttentionMaps decoder_attention_maps(Context& ctx, const LlamaDecoder& decoder,
                                     std::span<const std::int32_t> ids) {
  const model::Config& c = decoder.config();
  const i64 heads = uniform_heads(c, "model"), n = static_cast<i64>(ids.size());
  check(n >= 1 && n <= c.context, "ids", concat("1 to the model's context ", c.context, " tokens"),
        n);
  AttentionMaps maps{.layers = c.layer_count(), .heads = heads, .n = n};
  for (std::int32_t id : ids) maps.tokens.push_back(decoder.tokenizer().token(id));
  maps.probs.assign(static_cast<std::size_t>(maps.layers * heads * n * n), 0.0f);
  std::vector<float> scratch;
  KvCache cache = decoder.make_cache(n);
  (void)decoder.executor().forward(
      ctx, ids, cache, Logits::last,
      {.observe_attention = [&](i64 layer, const AttentionParams& params) {
        reference_probabilities(ctx, params,
                                TensorView::contiguous(maps.probs.data() + layer * heads * n * n,
                                                       DType::f32, {1, heads, n, n}),
                                scratch);
      }});
  return maps;
}

}  // namespace headcount
