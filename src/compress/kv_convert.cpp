// MHA -> GQA conversion of an encoder's weights, and the GQA -> MHA export.
//
// In PyTorch layout a head's key map is the block A_j = [W_k_j | b_k_j] (head_dim x (d + 1)):
// k_j = W_k_j x + b_k_j. Mean pooling replaces the G groups' K (and V) blocks by their means.
// Aligned pooling first rotates each head: for an orthogonal R, k' = R^T k and q' = R^T q leave
// every score q'.k' = q.k unchanged; v' = S^T v and W_o' = W_o S leave the output unchanged. R is
// the orthogonal Procrustes solution argmin ||R^T A_j - T||_F = polar factor of M = A_j T^T,
// M (M^T M)^(-1/2) (= U V^T of M's SVD), with T the group's mean of already aligned heads
// (generalised Procrustes: three rounds, starting from the group's first head). The rotation is
// exact, so an aligned model before pooling equals the original; only the pooling loses.
//
// Rotary models (Llama): the key rotation is restricted to the rotations that commute with the
// rotary positions applied after the projection: one 2-D rotation per frequency plane (rows i
// and i + hd/2, Hugging Face's half-pair layout), the same at every position. Two rotations of
// one plane commute, so rotating q and k by R before the positions gives the same scores after
// them. The best such R per plane has a closed form: with M = A_i T_i^T (2 x 2, the plane's rows
// of the head map and of the target), R = [[c, -s], [s, c]] at angle atan2(M10 - M01, M00 + M11)
// maximises tr(R^T M). Values carry no positions: their rotation is the full Procrustes one.
// In a grouped model each K/V head's rotations also act on every query head that reads it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

#include "compress/tensor_copy.h"
#include "headcount/compress.h"
#include "headcount/error.h"

namespace headcount {

using detail::concat;
using model::Role;

namespace {

constexpr int kProcrustesRounds = 3;

using Matrix = std::vector<double>;  // row-major, square n x n unless stated

// A head's block of `rows` rows of a [heads*hd, cols] weight and its [heads*hd] bias, as an
// hd x (cols + 1) matrix in double.
Matrix head_map(const Tensor& weight, const Tensor& bias, std::int64_t head, std::int64_t hd) {
  const std::int64_t cols = weight.size(1);
  Matrix m(static_cast<std::size_t>(hd * (cols + 1)));
  for (std::int64_t r = 0; r < hd; ++r) {
    for (std::int64_t c = 0; c < cols; ++c)
      m[static_cast<std::size_t>(r * (cols + 1) + c)] =
          weight.data<const float>()[(head * hd + r) * cols + c];
    m[static_cast<std::size_t>(r * (cols + 1) + cols)] = bias.data<const float>()[head * hd + r];
  }
  return m;
}

// Eigen-decomposition of a symmetric n x n matrix by cyclic Jacobi rotations: a = V diag(w) V^T.
void symmetric_eigen(Matrix a, std::int64_t n, std::vector<double>& w, Matrix& v) {
  v.assign(static_cast<std::size_t>(n * n), 0.0);
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i * n + i)] = 1.0;
  auto at = [&](Matrix& m, std::int64_t r, std::int64_t c) -> double& {
    return m[static_cast<std::size_t>(r * n + c)];
  };
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0, total = 0;
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < n; ++j) (i == j ? total : off) += at(a, i, j) * at(a, i, j);
    if (off <= 1e-30 * (total + off)) break;
    for (std::int64_t p = 0; p < n; ++p)
      for (std::int64_t q = p + 1; q < n; ++q) {
        const double apq = at(a, p, q);
        if (std::fabs(apq) < 1e-300) continue;
        const double theta = (at(a, q, q) - at(a, p, p)) / (2 * apq);
        const double t =
            (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (std::int64_t k = 0; k < n; ++k) {  // a <- J^T a J, columns then rows
          const double akp = at(a, k, p), akq = at(a, k, q);
          at(a, k, p) = c * akp - s * akq;
          at(a, k, q) = s * akp + c * akq;
        }
        for (std::int64_t k = 0; k < n; ++k) {
          const double apk = at(a, p, k), aqk = at(a, q, k);
          at(a, p, k) = c * apk - s * aqk;
          at(a, q, k) = s * apk + c * aqk;
        }
        for (std::int64_t k = 0; k < n; ++k) {
          const double vkp = at(v, k, p), vkq = at(v, k, q);
          at(v, k, p) = c * vkp - s * vkq;
          at(v, k, q) = s * vkp + c * vkq;
        }
      }
  }
  w.resize(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) w[static_cast<std::size_t>(i)] = at(a, i, i);
}

// R = argmin over orthogonal R of ||R^T A - T||_F for hd x cols matrices A, T: the polar factor
// of M = A T^T, M (M^T M)^(-1/2). Directions with a zero singular value are left as identity.
Matrix procrustes(const Matrix& a, const Matrix& t, std::int64_t hd, std::int64_t cols) {
  Matrix m(static_cast<std::size_t>(hd * hd), 0.0);
  for (std::int64_t i = 0; i < hd; ++i)
    for (std::int64_t j = 0; j < hd; ++j) {
      double s = 0;
      for (std::int64_t k = 0; k < cols; ++k)
        s += a[static_cast<std::size_t>(i * cols + k)] * t[static_cast<std::size_t>(j * cols + k)];
      m[static_cast<std::size_t>(i * hd + j)] = s;
    }
  Matrix mtm(static_cast<std::size_t>(hd * hd), 0.0);
  for (std::int64_t i = 0; i < hd; ++i)
    for (std::int64_t j = 0; j < hd; ++j) {
      double s = 0;
      for (std::int64_t k = 0; k < hd; ++k)
        s += m[static_cast<std::size_t>(k * hd + i)] * m[static_cast<std::size_t>(k * hd + j)];
      mtm[static_cast<std::size_t>(i * hd + j)] = s;
    }
  std::vector<double> w;
  Matrix v;
  symmetric_eigen(mtm, hd, w, v);
  const double top = *std::max_element(w.begin(), w.end());
  Matrix inv_sqrt(static_cast<std::size_t>(hd * hd), 0.0);  // V diag(w^-1/2) V^T
  for (std::int64_t k = 0; k < hd; ++k) {
    const double wk = w[static_cast<std::size_t>(k)];
    if (!(wk > 1e-24 * top)) continue;
    const double f = 1 / std::sqrt(wk);
    for (std::int64_t i = 0; i < hd; ++i)
      for (std::int64_t j = 0; j < hd; ++j)
        inv_sqrt[static_cast<std::size_t>(i * hd + j)] +=
            f * v[static_cast<std::size_t>(i * hd + k)] * v[static_cast<std::size_t>(j * hd + k)];
  }
  Matrix r(static_cast<std::size_t>(hd * hd), 0.0);
  for (std::int64_t i = 0; i < hd; ++i)
    for (std::int64_t j = 0; j < hd; ++j) {
      double s = 0;
      for (std::int64_t k = 0; k < hd; ++k)
        s += m[static_cast<std::size_t>(i * hd + k)] *
             inv_sqrt[static_cast<std::size_t>(k * hd + j)];
      r[static_cast<std::size_t>(i * hd + j)] = s;
    }
  return r;
}

// R^T A for an hd x cols A.
Matrix rotate(const Matrix& r, const Matrix& a, std::int64_t hd, std::int64_t cols) {
  Matrix out(static_cast<std::size_t>(hd * cols), 0.0);
  for (std::int64_t i = 0; i < hd; ++i)
    for (std::int64_t k = 0; k < hd; ++k) {
      const double f = r[static_cast<std::size_t>(k * hd + i)];
      for (std::int64_t c = 0; c < cols; ++c)
        out[static_cast<std::size_t>(i * cols + c)] +=
            f * a[static_cast<std::size_t>(k * cols + c)];
    }
  return out;
}

// The rotation that commutes with rotary positions (one 2-D rotation per plane (i, i + hd/2))
// minimising ||R^T A - T||_F, as an hd x hd matrix.
Matrix procrustes_rotary(const Matrix& a, const Matrix& t, std::int64_t hd, std::int64_t cols) {
  const std::int64_t half = hd / 2;
  Matrix r(static_cast<std::size_t>(hd * hd), 0.0);
  auto dot = [&](std::int64_t i, std::int64_t j) {  // row i of a . row j of t
    double s = 0;
    for (std::int64_t k = 0; k < cols; ++k)
      s += a[static_cast<std::size_t>(i * cols + k)] * t[static_cast<std::size_t>(j * cols + k)];
    return s;
  };
  for (std::int64_t i = 0; i < half; ++i) {
    const std::int64_t j = i + half;
    const double m00 = dot(i, i), m01 = dot(i, j), m10 = dot(j, i), m11 = dot(j, j);
    const double angle = std::atan2(m10 - m01, m00 + m11);
    const double c = std::cos(angle), s = std::sin(angle);
    r[static_cast<std::size_t>(i * hd + i)] = c;
    r[static_cast<std::size_t>(i * hd + j)] = -s;
    r[static_cast<std::size_t>(j * hd + i)] = s;
    r[static_cast<std::size_t>(j * hd + j)] = c;
  }
  return r;
}

// One rotation per head of `members` aligning its map (from weight/bias) to the group; `rotary`:
// only rotations that commute with rotary positions.
std::vector<Matrix> align_group(const Tensor& weight, const Tensor& bias,
                                const std::vector<std::int64_t>& members, std::int64_t hd,
                                bool rotary = false) {
  const std::int64_t cols = weight.size(1) + 1;
  std::vector<Matrix> maps, rotations(members.size());
  for (std::int64_t head : members) maps.push_back(head_map(weight, bias, head, hd));
  Matrix target = maps[0];
  for (int round = 0; round < kProcrustesRounds; ++round) {
    Matrix mean(target.size(), 0.0);
    for (std::size_t j = 0; j < members.size(); ++j) {
      rotations[j] = rotary ? procrustes_rotary(maps[j], target, hd, cols)
                            : procrustes(maps[j], target, hd, cols);
      const Matrix aligned = rotate(rotations[j], maps[j], hd, cols);
      for (std::size_t k = 0; k < mean.size(); ++k)
        mean[k] += aligned[k] / static_cast<double>(members.size());
    }
    target = std::move(mean);
  }
  return rotations;
}

// Rows [head*hd, (head+1)*hd) of weight [*, cols] and bias <- R^T (those rows).
void rotate_rows(Tensor& weight, Tensor& bias, std::int64_t head, std::int64_t hd,
                 const Matrix& r) {
  const std::int64_t cols = weight.size(1);
  const Matrix rotated = rotate(r, head_map(weight, bias, head, hd), hd, cols + 1);
  for (std::int64_t i = 0; i < hd; ++i) {
    for (std::int64_t c = 0; c < cols; ++c)
      weight.data<float>()[(head * hd + i) * cols + c] =
          static_cast<float>(rotated[static_cast<std::size_t>(i * (cols + 1) + c)]);
    bias.data<float>()[head * hd + i] =
        static_cast<float>(rotated[static_cast<std::size_t>(i * (cols + 1) + cols)]);
  }
}

// Columns [head*hd, (head+1)*hd) of w_o [d, *] <- (those columns) S.
void rotate_columns(Tensor& w_o, std::int64_t head, std::int64_t hd, const Matrix& s) {
  const std::int64_t rows = w_o.size(0), cols = w_o.size(1);
  std::vector<double> row(static_cast<std::size_t>(hd));
  for (std::int64_t r = 0; r < rows; ++r) {
    float* p = w_o.data<float>() + r * cols + head * hd;
    for (std::int64_t j = 0; j < hd; ++j) {
      double acc = 0;
      for (std::int64_t k = 0; k < hd; ++k)
        acc += static_cast<double>(p[k]) * s[static_cast<std::size_t>(k * hd + j)];
      row[static_cast<std::size_t>(j)] = acc;
    }
    for (std::int64_t j = 0; j < hd; ++j)
      p[j] = static_cast<float>(row[static_cast<std::size_t>(j)]);
  }
}

double map_cosine(const Matrix& a, const Matrix& b) {
  double ab = 0, aa = 0, bb = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    ab += a[k] * b[k];
    aa += a[k] * a[k];
    bb += b[k] * b[k];
  }
  return aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : 0.0;
}

// Equal-size groups by key similarity: the lowest-index free head seeds a group, which then
// takes, one at a time, the free head with the highest mean cosine to its members.
std::vector<std::int64_t> cluster_order(const Tensor& w_k, const Tensor& b_k, std::int64_t heads,
                                        std::int64_t per_group, std::int64_t hd) {
  std::vector<Matrix> maps;
  for (std::int64_t h = 0; h < heads; ++h) maps.push_back(head_map(w_k, b_k, h, hd));
  std::vector<bool> used(static_cast<std::size_t>(heads), false);
  std::vector<std::int64_t> order;
  for (std::int64_t seed = 0; seed < heads; ++seed) {
    if (used[static_cast<std::size_t>(seed)]) continue;
    std::vector<std::int64_t> group = {seed};
    used[static_cast<std::size_t>(seed)] = true;
    while (static_cast<std::int64_t>(group.size()) < per_group) {
      std::int64_t best = -1;
      double best_score = -2;
      for (std::int64_t h = 0; h < heads; ++h) {
        if (used[static_cast<std::size_t>(h)]) continue;
        double score = 0;
        for (std::int64_t m : group)
          score += map_cosine(maps[static_cast<std::size_t>(h)], maps[static_cast<std::size_t>(m)]);
        score /= static_cast<double>(group.size());
        if (score > best_score) best_score = score, best = h;
      }
      group.push_back(best);
      used[static_cast<std::size_t>(best)] = true;
    }
    order.insert(order.end(), group.begin(), group.end());
  }
  return order;
}

Tensor permute_row_blocks(const Tensor& t, const std::vector<std::int64_t>& order,
                          std::int64_t hd) {
  const std::int64_t cols = t.rank() == 2 ? t.size(1) : 1;
  Tensor out(DType::f32, t.shape());
  for (std::size_t i = 0; i < order.size(); ++i)
    std::memcpy(out.data<float>() + static_cast<std::int64_t>(i) * hd * cols,
                t.data<const float>() + order[i] * hd * cols,
                static_cast<std::size_t>(hd * cols) * sizeof(float));
  return out;
}

Tensor permute_column_blocks(const Tensor& t, const std::vector<std::int64_t>& order,
                             std::int64_t hd) {
  const std::int64_t rows = t.size(0), cols = t.size(1);
  Tensor out(DType::f32, t.shape());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::size_t i = 0; i < order.size(); ++i)
      std::memcpy(out.data<float>() + r * cols + static_cast<std::int64_t>(i) * hd,
                  t.data<const float>() + r * cols + order[i] * hd,
                  static_cast<std::size_t>(hd) * sizeof(float));
  return out;
}

// The double-accumulated mean of each group's `per_group` consecutive row blocks.
Tensor pool_row_blocks(const Tensor& t, std::int64_t groups, std::int64_t per_group,
                       std::int64_t hd) {
  const std::int64_t cols = t.rank() == 2 ? t.size(1) : 1;
  std::vector<std::int64_t> shape = t.shape();
  shape[0] = groups * hd;
  Tensor out(DType::f32, shape);
  for (std::int64_t g = 0; g < groups; ++g)
    for (std::int64_t i = 0; i < hd * cols; ++i) {
      double sum = 0;
      for (std::int64_t k = 0; k < per_group; ++k)
        sum += t.data<const float>()[(g * per_group + k) * hd * cols + i];
      out.data<float>()[g * hd * cols + i] =
          static_cast<float>(sum / static_cast<double>(per_group));
    }
  return out;
}

}  // namespace

KvConvertMethod parse_kv_convert_method(const std::string& name) {
  if (name == "mean") return KvConvertMethod::mean;
  if (name == "aligned") return KvConvertMethod::aligned;
  if (name == "clustered") return KvConvertMethod::clustered;
  fail("--method", concat("expected mean, aligned or clustered, got ", name));
}

const char* kv_convert_method_name(KvConvertMethod method) {
  switch (method) {
    case KvConvertMethod::mean:
      return "mean";
    case KvConvertMethod::aligned:
      return "aligned";
    case KvConvertMethod::clustered:
      return "clustered";
  }
  return "?";
}

namespace model {

namespace {

// A layer's attention weights by role; a family without biases gets zero biases here (the
// rotations and the pooling then act on the weights alone) that are not written back.
struct AttentionTensors {
  AttentionTensors(Weights& w, std::int64_t l)
      : wq(&w.at(Role::q_weight, l)),
        wk(&w.at(Role::k_weight, l)),
        wv(&w.at(Role::v_weight, l)),
        wo(&w.at(Role::o_weight, l)),
        bq(bias(w, l, Role::q_bias, zero_q, *wq)),
        bk(bias(w, l, Role::k_bias, zero_k, *wk)),
        bv(bias(w, l, Role::v_bias, zero_v, *wv)) {}
  // The b* pointers may point at the zero_* members: no copies.
  AttentionTensors(const AttentionTensors&) = delete;
  AttentionTensors& operator=(const AttentionTensors&) = delete;

  Tensor zero_q, zero_k, zero_v;  // declared first: constructed before the pointers to them
  Tensor *wq, *wk, *wv, *wo, *bq, *bk, *bv;

 private:
  static Tensor* bias(Weights& w, std::int64_t l, Role role, Tensor& zero, const Tensor& weight) {
    if (w.has(role, l)) return &w.at(role, l);
    zero = Tensor(DType::f32, {weight.size(0)});
    std::fill_n(zero.data<float>(), zero.numel(), 0.0f);
    return &zero;
  }
};

// Turns each K/V head of every group of `per_group` consecutive ones onto the group's common
// frame (keys: rotary-commuting rotations when `rotary`), and every query head reading it (its
// Q rows, its W_O columns) with it: the layer computes what it did.
void align_layer(AttentionTensors& a, bool rotary, std::int64_t heads, std::int64_t kv_heads,
                 std::int64_t per_group, std::int64_t hd) {
  const std::int64_t readers = heads / kv_heads;  // query heads per K/V head
  for (std::int64_t first = 0; first < kv_heads; first += per_group) {
    std::vector<std::int64_t> members(static_cast<std::size_t>(per_group));
    std::iota(members.begin(), members.end(), first);
    const std::vector<Matrix> key_rotations = align_group(*a.wk, *a.bk, members, hd, rotary);
    const std::vector<Matrix> value_rotations = align_group(*a.wv, *a.bv, members, hd);
    for (std::size_t j = 0; j < members.size(); ++j) {
      rotate_rows(*a.wk, *a.bk, members[j], hd, key_rotations[j]);
      rotate_rows(*a.wv, *a.bv, members[j], hd, value_rotations[j]);
      for (std::int64_t q = members[j] * readers; q < (members[j] + 1) * readers; ++q) {
        rotate_rows(*a.wq, *a.bq, q, hd, key_rotations[j]);
        rotate_columns(*a.wo, q, hd, value_rotations[j]);
      }
    }
  }
}

void check_kv_heads(const Config& c, std::int64_t kv_heads) {
  for (std::int64_t l = 0; l < c.layer_count(); ++l)
    check(kv_heads >= 1 && c.kv_heads_in(l) % kv_heads == 0, "--kv-heads",
          concat("a divisor of layer ", l, "'s ", c.kv_heads_in(l), " K/V heads"), kv_heads);
}

}  // namespace

Weights align_kv_heads(const Weights& w, std::int64_t kv_heads) {
  const Config& c = w.config;
  check_kv_heads(c, kv_heads);
  Weights out = w.clone();
  for (std::int64_t l = 0; l < c.layer_count(); ++l) {
    const std::int64_t per_group = c.kv_heads_in(l) / kv_heads;
    AttentionTensors a(out, l);
    if (per_group > 1)
      align_layer(a, c.positions == Positions::rotary, c.heads_in(l), c.kv_heads_in(l), per_group,
                  c.head_dim);
  }
  return out;
}

Weights convert_kv_heads(const Weights& w, std::int64_t kv_heads, KvConvertMethod method) {
  const Config& c = w.config;
  if (method == KvConvertMethod::clustered)
    check(!c.grouped(), "model",
          "a multi-head model for the clustered method (every layer with as many K/V heads as "
          "heads)",
          "a grouped one");
  check_kv_heads(c, kv_heads);
  Weights out = w.clone();
  const std::int64_t hd = c.head_dim;
  for (std::int64_t l = 0; l < c.layer_count(); ++l) {
    const std::int64_t h = c.heads_in(l), per_group = c.kv_heads_in(l) / kv_heads;
    AttentionTensors a(out, l);
    if (method == KvConvertMethod::clustered && per_group > 1) {
      // Reorder the heads so that each cluster is contiguous: every head's Q, K, V rows and W_o
      // columns move together, which changes nothing the layer computes.
      const std::vector<std::int64_t> order = cluster_order(*a.wk, *a.bk, h, per_group, hd);
      for (Tensor* x : {a.wq, a.bq, a.wk, a.bk, a.wv, a.bv}) *x = permute_row_blocks(*x, order, hd);
      *a.wo = permute_column_blocks(*a.wo, order, hd);
    }
    if (method == KvConvertMethod::aligned && per_group > 1)
      align_layer(a, c.positions == Positions::rotary, h, c.kv_heads_in(l), per_group, hd);
    for (Tensor* x : {a.wk, a.bk, a.wv, a.bv}) *x = pool_row_blocks(*x, kv_heads, per_group, hd);
    out.config.layers[static_cast<std::size_t>(l)].kv_heads = kv_heads;
  }
  validate(out.config, "converted model");
  return out;
}

Weights repeat_kv_heads(const Weights& w) {
  const Config& c = w.config;
  Weights out = w.clone();
  const std::int64_t hd = c.head_dim;
  for (std::int64_t l = 0; l < c.layer_count(); ++l) {
    const std::int64_t h = c.heads_in(l), group = h / c.kv_heads_in(l);
    for (Role role : {Role::k_weight, Role::k_bias, Role::v_weight, Role::v_bias}) {
      if (!out.has(role, l)) continue;
      Tensor& x = out.at(role, l);
      std::vector<std::int64_t> shape = x.shape();
      shape[0] = h * hd;
      const std::int64_t cols = x.rank() == 2 ? x.size(1) : 1;
      Tensor repeated(DType::f32, shape);
      for (std::int64_t i = 0; i < h; ++i)  // query head i reads K/V head i / group
        std::memcpy(repeated.data<float>() + i * hd * cols,
                    x.data<const float>() + (i / group) * hd * cols,
                    static_cast<std::size_t>(hd * cols) * sizeof(float));
      x = std::move(repeated);
    }
    out.config.layers[static_cast<std::size_t>(l)].kv_heads = h;
  }
  return out;
}

}  // namespace model

EncoderWeights convert_kv_heads(const EncoderWeights& w, std::int64_t kv_heads,
                                KvConvertMethod method) {
  check(!w.config.is_grouped(), "model",
        "a multi-head model (every layer with as many K/V heads as heads)", "a grouped one");
  EncoderWeights out{.source_dir = w.source_dir,
                     .config = w.config,
                     .model = model::convert_kv_heads(w.model, kv_heads, method)};
  out.config.kv_heads.assign(static_cast<std::size_t>(w.config.layers), kv_heads);
  validate_head_layout(out.config, "converted model");
  return out;
}

EncoderWeights repeat_kv_heads(const EncoderWeights& w) {
  EncoderWeights out{
      .source_dir = w.source_dir, .config = w.config, .model = model::repeat_kv_heads(w.model)};
  out.config.kv_heads.clear();
  return out;
}

}  // namespace headcount
