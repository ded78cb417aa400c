// The distributions the rules of evidence need (verdict.h), in double:
//   Student's t: CDF through the regularised incomplete beta function,
//                F(t; ν) = 1 - ½ I_{ν/(ν+t²)}(ν/2, ½) for t >= 0 (symmetric below 0),
//                and its quantile by bisection on that CDF (60 halvings of [0, 1e6]: far
//                below the CDF's own error of ~1e-14);
//   Fisher's exact test, one-sided: P(X >= a) for X ~ Hypergeometric(N = n_a + n_b,
//                K = a + b successes, n_a draws), the probability under "both arms succeed
//                equally often" of A doing at least this well.
// I_x(a, b) is evaluated by its continued fraction (modified Lentz), on the side of x where it
// converges fast (x < (a + 1)/(a + b + 2), else through I_x(a, b) = 1 - I_{1-x}(b, a)).
#pragma once

#include <cstdint>

namespace headcount::experiments {

double regularized_incomplete_beta(double x, double a, double b);
double student_t_cdf(double t, double dof);
// The q-quantile (0 < q < 1) of Student's t with `dof` > 0 degrees of freedom.
double student_t_quantile(double q, double dof);
// One-sided Fisher exact p-value that arm A (successes_a of n_a) succeeds more often than arm B.
double fisher_one_sided(std::int64_t successes_a, std::int64_t n_a, std::int64_t successes_b,
                        std::int64_t n_b);

}  // namespace headcount::experiments
