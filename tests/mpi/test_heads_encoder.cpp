// The encoder with its heads and FFN over ranks (heads_parallel_encoder) against one process,
// on all-MiniLM-L6-v2 (12 heads, intermediate 1536: every count from 1 to 4 divides both).
// With one rank the slice is the whole model and the embeddings are bitwise the one process's.
// With more, each head is still computed whole on one rank; what changes is the grouping of the
// sums over heads (W_o) and FFN columns (W_down). As in test_heads_training.cpp, by backward
// error analysis both runs are exact runs of W_o and W_down perturbed element-wise by at most
// gamma_K relative (K = the sum's length: 384, 1536); the effect of such perturbations is
// measured on the one process (random signs, three draws) and the bound is 4x the largest
// change of an embedding component. A head or FFN column on the wrong rank moves embeddings
// by orders of magnitude more.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "headcount/compress.h"
#include "headcount/distributed.h"
#include "headcount/error.h"
#include "mpi_testing.h"

namespace headcount::testing {
namespace {

namespace hd = headcount::distributed;
using i64 = std::int64_t;

const std::vector<std::string>& sentences() {
  static const std::vector<std::string> texts = {
      "The cat sat on the mat.",
      "A much longer sentence, with commas, clauses and a number or two (42, 1984), so that "
      "its batch is padded differently from the short ones.",
      "Short.",
      "Heads are slices of one budget.",
      "Tensor parallel attention keeps each head whole on one rank.",
      "Le chat est assis sur le tapis."};
  return texts;
}

#define HEADCOUNT_REQUIRE_MINILM()                                            \
  do {                                                                        \
    if (!std::filesystem::exists(std::filesystem::path(default_model_dir()) / \
                                 "model.safetensors"))                        \
      GTEST_SKIP() << "all-MiniLM-L6-v2 not found in " << default_model_dir() \
                   << " (run scripts/setup.sh)";                              \
  } while (0)

double largest_difference(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (i64 i = 0; i < a.numel(); ++i)
    m = std::max(
        m, std::fabs(static_cast<double>(a.data<const float>()[i]) - b.data<const float>()[i]));
  return m;
}

// The largest change of an embedding component when W_o and W_down are perturbed as a
// regrouped sum may perturb them (file comment), over three draws.
double regrouping_change(Context& ctx, const EncoderWeights& whole, const Tensor& reference) {
  using model::Role;
  std::mt19937_64 rng(5);
  double largest = 0;
  const EncoderConfig& c = whole.config;
  for (int draw = 0; draw < 3; ++draw) {
    EncoderWeights w{
        .source_dir = whole.source_dir, .config = whole.config, .model = whole.model.clone()};
    for (i64 l = 0; l < c.layers; ++l)
      for (const auto& [role, k] : {std::pair{Role::o_weight, c.hidden_size},
                                    std::pair{Role::ffn_down_weight, c.intermediate_size}}) {
        const double g = gamma_n(static_cast<double>(k));
        Tensor& t = w.model.at(role, l);
        for (i64 i = 0; i < t.numel(); ++i)
          t.data<float>()[i] =
              static_cast<float>(t.data<float>()[i] * (1.0 + ((rng() & 1) ? g : -g)));
      }
    const Tensor got = encoder_from_weights(w).embed(ctx, sentences());
    largest = std::max(largest, largest_difference(got, reference));
  }
  return largest;
}

TEST(HeadParallelEncoder, EmbeddingsMatchOneProcess) {
  HEADCOUNT_REQUIRE_MINILM();
  Context ctx({.threads = 1});
  const EncoderWeights whole = read_encoder_weights(default_model_dir());
  const Tensor want = encoder_from_weights(whole).embed(ctx, sentences());
  hd::CommStats stats;
  const BertEncoder split =
      hd::heads_parallel_encoder(MPI_COMM_WORLD, whole, {.timeout_seconds = 120}, &stats);
  EXPECT_EQ(split.config().intermediate_size, whole.config.intermediate_size / world_size());
  EXPECT_EQ(split.config().layer_heads(0), whole.config.heads / world_size());
  const Tensor got = split.embed(ctx, sentences());
  ASSERT_EQ(got.shape(), want.shape());
  if (world_size() == 1) {
    EXPECT_EQ(0, std::memcmp(got.data<const float>(), want.data<const float>(),
                             static_cast<std::size_t>(want.numel()) * 4));
    EXPECT_EQ(stats.bytes_sent, 0);
    return;
  }
  const double bound = 4 * regrouping_change(ctx, whole, want);
  const double diff = largest_difference(got, want);
  EXPECT_LE(diff, bound) << world_size() << " ranks";
  EXPECT_GT(diff, 0.0) << "regrouped sums that change nothing: is the split really split?";
  // Two sums of [rows, d] floats per layer and forward; every forward's rows are a multiple
  // of d's floats: the count divides evenly.
  EXPECT_EQ(stats.bytes_sent % (2 * whole.config.layers * whole.config.hidden_size * 4), 0);
  EXPECT_GT(stats.bytes_sent, 0);
  if (world_rank() == 0)
    std::printf("heads over %d ranks: largest embedding difference %.3g, bound %.3g\n",
                world_size(), diff, bound);
}

TEST(HeadParallelEncoder, RanksMustDivideHeadsAndIntermediate) {
  HEADCOUNT_REQUIRE_MINILM();
  const EncoderWeights whole = read_encoder_weights(default_model_dir());
  for (int ranks : {5, 7}) {
    try {
      hd::heads_parallel_slice(whole, ranks, 0);
      ADD_FAILURE() << ranks << " ranks: no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("ranks"), std::string::npos) << e.what();
    }
  }
  // 8 divides intermediate_size = 1536 but not kv_heads = 12.
  try {
    hd::heads_parallel_slice(whole, 8, 0);
    ADD_FAILURE() << "8 ranks: no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("kv_heads = 12"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace headcount::testing
