// Row statistics of attention (include/headcount/head_stats.h): the second pass that
// reuses the log-sum-exp, and the reduction of materialised probabilities it is tested against.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <type_traits>

#include "headcount/error.h"
#include "headcount/head_stats.h"
#include "kernels/masking.h"

namespace headcount {

using detail::concat;
using kernels::KeyRange;
using kernels::MaskSpec;

namespace {

constexpr std::int64_t kRowsPerTask = 16;

void check_spec(const AttentionShape& s, const RowStatsSpec& spec) {
  HEADCOUNT_CHECK(spec.classes >= 0 && spec.classes <= 8, "row stats classes",
                  "0..8 (bits of a uint8)", spec.classes);
  if (spec.classes > 0) {
    HEADCOUNT_CHECK(
        static_cast<std::int64_t>(spec.key_classes.size()) == s.batch * s.kv_len,
        "row stats key_classes",
        concat(s.batch * s.kv_len, " entries ([batch, kv_len] = [", s.batch, ", ", s.kv_len, "])"),
        spec.key_classes.size());
  }
  for (std::int64_t o : spec.offsets)
    HEADCOUNT_CHECK(std::llabs(o) <= (std::int64_t{1} << 40), "row stats offset",
                    "|offset| <= 2^40", o);
}

// No allocation unless the check fails: the second pass runs once per layer call in analysis.
void check_out(const AttentionShape& s, const RowStatsSpec& spec, const TensorView& out) {
  const std::int64_t fields = spec.fields();
  auto want = [&] {
    return shape_string(std::vector<std::int64_t>{s.batch, s.heads, s.q_len, fields});
  };
  HEADCOUNT_CHECK(!out.empty() && out.dtype == DType::f64 && out.is_contiguous(), "row stats out",
                  concat("a contiguous f64 tensor ", want()),
                  out.empty() ? std::string("no data")
                              : concat(dtype_name(out.dtype), ' ', out.shape_string()));
  HEADCOUNT_CHECK(out.rank == 4 && out.shape[0] == s.batch && out.shape[1] == s.heads &&
                      out.shape[2] == s.q_len && out.shape[3] == fields,
                  "row stats out shape", want(), out.shape_string());
}

// lse must be what an attention call wrote: finite, or -inf for a row that sees no key. A NaN
// here would turn every statistic of its row into NaN without a word.
void check_lse(const AttentionShape& s, const TensorView& lse) {
  HEADCOUNT_CHECK(lse.dtype == DType::f32 && lse.rank == 3 && lse.shape[0] == s.batch &&
                      lse.shape[1] == s.heads && lse.shape[2] == s.q_len,
                  "lse", concat("an f32 tensor [", s.batch, ", ", s.heads, ", ", s.q_len, "]"),
                  concat(dtype_name(lse.dtype), ' ', lse.shape_string()));
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h)
      for (std::int64_t i = 0; i < s.q_len; ++i) {
        const float v =
            lse.ptr<const float>()[b * lse.strides[0] + h * lse.strides[1] + i * lse.strides[2]];
        if (std::isnan(v) || v == std::numeric_limits<float>::infinity())
          fail("lse", concat("expected the attention call's log-sum-exp (finite, or -inf for a row "
                             "that sees no key), got ",
                             v, " at [", b, ", ", h, ", ", i, "]"));
      }
}

// The additive bias of (b, h, i, j), 0 without one; -inf hides the key.
struct BiasReader {
  const TensorView* bias;
  float at(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) const {
    if (bias->empty()) return 0.0f;
    return bias->ptr<const float>()[bias->offset(
        {bias->shape[0] == 1 ? 0 : b, bias->shape[1] == 1 ? 0 : h, i, j})];
  }
};

template <typename T>
float load(const T* data, std::int64_t offset) {
  if constexpr (std::is_same_v<T, bf16>) {
    return to_float(data[offset]);
  } else {
    return data[offset];
  }
}

// q_i . k_j in fp32 with eight partial sums (the same rounding class as the kernels' tiles).
template <typename T>
float dot(const float* q, const T* k, std::int64_t k_stride, std::int64_t n) {
  float part[8] = {};
  std::int64_t d = 0;
  for (; d + 8 <= n; d += 8)
    for (int l = 0; l < 8; ++l) part[l] += q[d + l] * load(k, (d + l) * k_stride);
  for (; d < n; ++d) part[0] += q[d] * load(k, d * k_stride);
  return ((part[0] + part[4]) + (part[1] + part[5])) + ((part[2] + part[6]) + (part[3] + part[7]));
}

template <typename T>
void row_stats_pass(Context& ctx, const AttentionParams& p, const AttentionShape& s,
                    const RowStatsSpec& spec, double* out) {
  const MaskSpec mask = MaskSpec::from(p, s);
  const BiasReader bias{&p.bias};
  const std::int64_t fields = spec.fields();
  const std::int64_t blocks = (s.q_len + kRowsPerTask - 1) / kRowsPerTask;
  const T* q_data = p.q.ptr<const T>();
  const T* k_data = p.k.ptr<const T>();
  const float* lse_data = p.lse.ptr<const float>();

  ctx.parallel_for(s.batch * s.heads * blocks, [&](std::int64_t task, int worker) {
    const std::int64_t block = task % blocks;
    const std::int64_t h = (task / blocks) % s.heads;
    const std::int64_t b = task / (blocks * s.heads);
    const std::int64_t kv_h = kv_head_of(h, s.group);
    const std::int64_t key_length = kernels::key_length_of(p, s, b);
    float* q = static_cast<float*>(
        ctx.scratch(worker, static_cast<std::size_t>(s.head_dim) * sizeof(float)));
    const std::uint8_t* classes =
        spec.classes > 0 ? spec.key_classes.data() + b * s.kv_len : nullptr;

    for (std::int64_t i = block * kRowsPerTask; i < std::min(s.q_len, (block + 1) * kRowsPerTask);
         ++i) {
      double* row = out + ((b * s.heads + h) * s.q_len + i) * fields;
      std::fill(row, row + fields, 0.0);
      const KeyRange keys = mask.keys_for(i, key_length);
      const float lse = lse_data[p.lse.offset({b, h, i})];
      const std::int64_t diagonal = i + mask.diagonal_offset;
      for (std::int64_t d = 0; d < s.head_dim; ++d) q[d] = load(q_data, p.q.offset({b, i, h, d}));

      // t_ij and p_ij = exp(t_ij - lse_i) of one key; nullopt-like -inf for a hidden key.
      auto score = [&](std::int64_t j) {
        const float t =
            s.scale * dot(q, k_data + p.k.offset({b, j, kv_h, 0}), p.k.strides[3], s.head_dim);
        return t + bias.at(b, h, i, j);
      };
      for (std::int64_t j = keys.begin; j < keys.end; ++j) {
        const float t = score(j);
        if (t == -std::numeric_limits<float>::infinity()) continue;
        row[kRowVisible] += 1.0;
        if (lse == -std::numeric_limits<float>::infinity()) continue;
        const double prob = std::exp(static_cast<double>(t) - lse);
        row[kRowMass] += prob;
        row[kRowEntropy] += prob * (static_cast<double>(lse) - t);  // -p ln p, ln p = t - lse
        row[kRowDistance] += prob * static_cast<double>(std::llabs(j - diagonal));
        if (classes != nullptr)
          for (int c = 0; c < spec.classes; ++c)
            if (classes[j] & (1u << c)) row[spec.class_field(c)] += prob;
      }
      if (lse == -std::numeric_limits<float>::infinity()) continue;
      for (std::size_t o = 0; o < spec.offsets.size(); ++o) {
        const std::int64_t j = diagonal + spec.offsets[o];
        if (j < keys.begin || j >= keys.end) continue;
        const float t = score(j);
        if (t != -std::numeric_limits<float>::infinity())
          row[spec.offset_field(o)] = std::exp(static_cast<double>(t) - lse);
      }
    }
  });
}

}  // namespace

void attention_row_stats(Context& ctx, const AttentionParams& params, const RowStatsSpec& spec,
                         const TensorView& out) {
  const AttentionShape s = validate(params);
  HEADCOUNT_CHECK(!params.lse.empty(), "lse",
                  concat("the log-sum-exp [", s.batch, ", ", s.heads, ", ", s.q_len,
                         "] of the attention call (set params.lse when running it)"),
                  "no data");
  check_lse(s, params.lse);
  check_spec(s, spec);
  check_out(s, spec, out);
  // exp(t - lse) with fp32 t: the exponent is evaluated in double so the only rounding left is
  // the fp32 score's, the same as the kernels'.
  if (params.q.dtype == DType::bf16) {
    row_stats_pass<bf16>(ctx, params, s, spec, out.ptr<double>());
  } else {
    row_stats_pass<float>(ctx, params, s, spec, out.ptr<double>());
  }
}

void attention_row_stats_from_probs(const AttentionParams& params, const TensorView& probs,
                                    const RowStatsSpec& spec, const TensorView& out) {
  AttentionParams p = params;
  p.probs_mode = ProbsMode::none;
  p.probs = {};
  const AttentionShape s = validate(p);
  const std::vector<std::int64_t> want{s.batch, s.heads, s.q_len, s.kv_len};
  HEADCOUNT_CHECK(
      !probs.empty() && (probs.dtype == DType::f32 || probs.dtype == DType::f64) &&
          std::vector<std::int64_t>(probs.shape.begin(), probs.shape.begin() + probs.rank) == want,
      "probs", concat("an f32 or f64 tensor ", shape_string(want)),
      probs.empty() ? std::string("no data")
                    : concat(dtype_name(probs.dtype), ' ', probs.shape_string()));
  check_spec(s, spec);
  check_out(s, spec, out);
  const MaskSpec mask = MaskSpec::from(p, s);
  const BiasReader bias{&p.bias};
  const std::int64_t fields = spec.fields();
  auto prob_at = [&](std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
    const std::int64_t off = probs.offset({b, h, i, j});
    return probs.dtype == DType::f64 ? probs.ptr<const double>()[off]
                                     : static_cast<double>(probs.ptr<const float>()[off]);
  };
  for (std::int64_t b = 0; b < s.batch; ++b)
    for (std::int64_t h = 0; h < s.heads; ++h)
      for (std::int64_t i = 0; i < s.q_len; ++i) {
        double* row = out.ptr<double>() + ((b * s.heads + h) * s.q_len + i) * fields;
        std::fill(row, row + fields, 0.0);
        const KeyRange keys = mask.keys_for(i, kernels::key_length_of(p, s, b));
        const std::int64_t diagonal = i + mask.diagonal_offset;
        for (std::int64_t j = keys.begin; j < keys.end; ++j) {
          if (bias.at(b, h, i, j) == -std::numeric_limits<float>::infinity()) continue;
          row[kRowVisible] += 1.0;
          const double prob = prob_at(b, h, i, j);
          row[kRowMass] += prob;
          if (prob > 0) row[kRowEntropy] -= prob * std::log(prob);
          row[kRowDistance] += prob * static_cast<double>(std::llabs(j - diagonal));
          if (spec.classes > 0)
            for (int c = 0; c < spec.classes; ++c)
              if (spec.key_classes[static_cast<std::size_t>(b * s.kv_len + j)] & (1u << c))
                row[spec.class_field(c)] += prob;
        }
        for (std::size_t o = 0; o < spec.offsets.size(); ++o) {
          const std::int64_t j = diagonal + spec.offsets[o];
          if (j >= keys.begin && j < keys.end) row[spec.offset_field(o)] = prob_at(b, h, i, j);
        }
      }
}

}  // namespace headcount
