// Student's t and Fisher's exact test for the rules of evidence (statistics.h).
#include "experiments/statistics.h"

#include <cmath>
#include <limits>

#include "headcount/error.h"

namespace headcount::experiments {

using detail::concat;

namespace {

// The continued fraction of I_x(a, b) (modified Lentz); converges for x < (a + 1)/(a + b + 2).
double beta_fraction(double x, double a, double b) {
  constexpr double tiny = 1e-300, eps = 1e-16;
  double c = 1, d = 1 - (a + b) * x / (a + 1);
  if (std::fabs(d) < tiny) d = tiny;
  d = 1 / d;
  double f = d;
  for (int m = 1; m <= 10000; ++m) {
    const double m2 = 2.0 * m;
    // The even step, then the odd step of the fraction.
    double num = m * (b - m) * x / ((a + m2 - 1) * (a + m2));
    d = 1 + num * d;
    c = 1 + num / c;
    if (std::fabs(d) < tiny) d = tiny;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1 / d;
    f *= d * c;
    num = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1));
    d = 1 + num * d;
    c = 1 + num / c;
    if (std::fabs(d) < tiny) d = tiny;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1 / d;
    const double step = d * c;
    f *= step;
    if (std::fabs(step - 1) < eps) return f;
  }
  fail("regularized_incomplete_beta",
       concat("a continued fraction that converges for x = ", x, ", a = ", a, ", b = ", b));
}

}  // namespace

double regularized_incomplete_beta(double x, double a, double b) {
  HEADCOUNT_CHECK(a > 0 && b > 0 && std::isfinite(a) && std::isfinite(b), "incomplete beta a, b",
                  "positive and finite", concat(a, ", ", b));
  HEADCOUNT_CHECK(x >= 0 && x <= 1, "incomplete beta x", "in [0, 1]", x);
  if (x == 0 || x == 1) return x;
  // x^a (1-x)^b / (a B(a, b)) in logs.
  const double front = std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) +
                                a * std::log(x) + b * std::log1p(-x));
  if (x < (a + 1) / (a + b + 2)) return front * beta_fraction(x, a, b) / a;
  return 1 - front * beta_fraction(1 - x, b, a) / b;
}

double student_t_cdf(double t, double dof) {
  HEADCOUNT_CHECK(dof > 0 && std::isfinite(dof), "degrees of freedom", "positive", dof);
  HEADCOUNT_CHECK(!std::isnan(t), "t", "a number", t);
  if (std::isinf(t)) return t > 0 ? 1.0 : 0.0;
  const double tail = 0.5 * regularized_incomplete_beta(dof / (dof + t * t), dof / 2, 0.5);
  return t >= 0 ? 1 - tail : tail;
}

double student_t_quantile(double q, double dof) {
  HEADCOUNT_CHECK(q > 0 && q < 1, "quantile", "in (0, 1)", q);
  if (q < 0.5) return -student_t_quantile(1 - q, dof);
  double lo = 0, hi = 1e6;
  for (int i = 0; i < 200 && hi - lo > 1e-15 * hi; ++i) {
    const double mid = 0.5 * (lo + hi);
    (student_t_cdf(mid, dof) < q ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

double fisher_one_sided(std::int64_t successes_a, std::int64_t n_a, std::int64_t successes_b,
                        std::int64_t n_b) {
  HEADCOUNT_CHECK(n_a >= 1 && n_b >= 1 && successes_a >= 0 && successes_a <= n_a &&
                      successes_b >= 0 && successes_b <= n_b,
                  "success counts", "0 <= successes <= runs >= 1 in each arm",
                  concat(successes_a, "/", n_a, " and ", successes_b, "/", n_b));
  const std::int64_t total = n_a + n_b, k = successes_a + successes_b;
  auto log_choose = [](std::int64_t n, std::int64_t r) {
    return std::lgamma(static_cast<double>(n) + 1) - std::lgamma(static_cast<double>(r) + 1) -
           std::lgamma(static_cast<double>(n - r) + 1);
  };
  const double denominator = log_choose(total, n_a);
  double p = 0;
  for (std::int64_t x = successes_a; x <= std::min(k, n_a); ++x)
    if (k - x <= n_b)
      p += std::exp(log_choose(k, x) + log_choose(total - k, n_a - x) - denominator);
  return std::min(p, 1.0);
}

}  // namespace headcount::experiments
