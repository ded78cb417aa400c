// Built with `c++ pkgconfig_main.cpp $(pkg-config --cflags --libs headcount)`: the pkg-config
// file alone is enough to compile and link against the installed library.
#include <cstdio>

#include "headcount/cost.h"
#include "headcount/version.h"

int main() {
  const headcount::CostReport r =
      headcount::estimate_cost({.d_model = 512, .heads = 8, .seq_len = 1000});
  std::printf("headcount %s via pkg-config: projections %lld multiply-adds\n", headcount::version(),
              static_cast<long long>(r.projections.macs));
  return r.projections.macs == 1048576000LL ? 0 : 1;
}
