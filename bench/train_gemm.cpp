// The training step's GEMM shapes alone on layers::gemm (nanogpt-cpu: d_model 128, d_ff 512,
// 768 rows = batch 12 x context 64): the forward, dX = dY·Wᵀ and dW = Xᵀ·dY products of the
// QKV, W_O, FFN up and down projections, warm caches, median of 200 calls, GFLOP/s.
//   g++ -O2 -std=c++20 -Iinclude -Isrc bench/train_gemm.cpp build/libheadcount.a -pthread -o
//   build/train_gemm build/train_gemm [threads=2]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "layers/gemm.h"
using namespace headcount;
int main(int argc, char** argv) {
  int threads = argc > 1 ? atoi(argv[1]) : 2;
  Context ctx({.threads = threads});
  struct S {
    long m, n, k;
    bool ta, tb;
    const char* what;
  };
  std::vector<S> shapes = {{768, 384, 128, 0, 0, "qkv fwd"}, {768, 128, 128, 0, 0, "o fwd"},
                           {768, 512, 128, 0, 0, "up fwd"},  {768, 128, 512, 0, 0, "down fwd"},
                           {768, 128, 384, 0, 1, "qkv dX"},  {768, 128, 512, 0, 1, "up dX"},
                           {768, 512, 128, 0, 1, "down dX"}, {128, 384, 768, 1, 0, "qkv dW"},
                           {128, 512, 768, 1, 0, "up dW"},   {512, 128, 768, 1, 0, "down dW"}};
  for (auto s : shapes) {
    std::vector<float> a(s.m * s.k, 0.01f), b(s.k * s.n, 0.02f), c(s.m * s.n);
    auto run = [&] {
      layers::gemm(ctx, {.m = s.m,
                         .n = s.n,
                         .k = s.k,
                         .a = a.data(),
                         .lda = s.ta ? s.m : s.k,
                         .b = b.data(),
                         .ldb = s.tb ? s.k : s.n,
                         .c = c.data(),
                         .ldc = s.n,
                         .trans_a = s.ta,
                         .trans_b = s.tb});
    };
    for (int i = 0; i < 20; ++i) run();
    std::vector<double> t;
    for (int i = 0; i < 200; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      run();
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    printf("%-9s m %4ld n %4ld k %4ld  %7.1f us  %6.1f GFLOP/s\n", s.what, s.m, s.n, s.k,
           t[100] * 1e6, 2.0 * s.m * s.n * s.k / t[100] / 1e9);
  }
}
