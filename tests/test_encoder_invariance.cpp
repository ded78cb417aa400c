// Batch-, padding- and thread-invariant embeddings (issue 13): every STS-B test sentence
// (../shared/data/stsb/sts-test.tsv when present; otherwise the first 1,000 lines of the
// committed data/pride-and-prejudice.txt, so a clone without ../shared runs it too) embedded
// alone on one thread, then in batches of 32 sorted by length (embed's dynamic batching) on 2
// threads, in batches of 32 in input order (padded to the longest) on 1 thread, and in those
// batches padded 9 tokens further on 2 threads: every embedding bitwise equal to the
// sentence's alone. (Four passes over 2,758 sentences: the suite's longest test, ~40 s of CPU.)
//
// Why it holds: the projections run on the packed GEMM, where an element's arithmetic
// depends only on its own row (packed_gemm.h); embeddings, LayerNorm and GELU are per token;
// the attention kernel computes each query's scores and weighted sum in the same order of
// keys whatever the padding (a padded key scores -inf, weighs exactly 0 and adds exactly 0),
// and batch elements never share a task; pooling sums each sentence's valid rows in order.
// The hidden-state test checks the padded rows leave every valid row's arithmetic alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "headcount/encoder.h"
#include "headcount/sts.h"
#include "minilm_golden.h"
#include "sanitized.h"

namespace headcount::testing {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> invariance_sentences() {
  std::vector<std::string> out;
  const std::string sts =
      std::string(HEADCOUNT_TESTDATA_DIR) + "/../../../shared/data/stsb/sts-test.tsv";
  if (fs::exists(sts)) {
    for (const StsPair& p : read_sts(sts)) {
      out.push_back(p.sentence1);
      out.push_back(p.sentence2);
    }
  } else {
    std::ifstream in(std::string(HEADCOUNT_TESTDATA_DIR) + "/../../data/pride-and-prejudice.txt");
    for (std::string line; std::getline(in, line) && out.size() < 1000;)
      if (line.find_first_not_of(" \t\r") != std::string::npos) out.push_back(line);
  }
#if HEADCOUNT_TEST_SANITIZED
  // The sanitizer builds run ~20x slower: the first 64 sentences (two batches of 32) keep its
  // cost to seconds while still covering sorted, unsorted and padded batches. (Before
  // tests/sanitized.h, clang's ASan build missed this and spent 793 s on all 2,758.)
  if (out.size() > 64) out.resize(64);
#endif
  return out;
}

class EncoderInvariance : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!minilm_present()) return;
    encoder_ = new BertEncoder(BertEncoder::load(default_model_dir()));
    texts_ = invariance_sentences();
  }
  static void TearDownTestSuite() {
    delete encoder_;
    encoder_ = nullptr;
  }
  static inline BertEncoder* encoder_ = nullptr;
  static inline std::vector<std::string> texts_;
};

// Rows of `got` that differ in any bit from `alone`, as "index: text" lines (at most 5).
std::string differing_rows(const Tensor& alone, const Tensor& got,
                           const std::vector<std::string>& texts, std::int64_t* count) {
  std::string report;
  *count = 0;
  const std::int64_t d = alone.size(1);
  for (std::int64_t r = 0; r < alone.size(0); ++r)
    if (std::memcmp(alone.data<const float>() + r * d, got.data<const float>() + r * d,
                    d * sizeof(float)) != 0 &&
        ++*count <= 5)
      report += std::to_string(r) + ": " + texts[static_cast<std::size_t>(r)] + "\n";
  return report;
}

// The batches of 32 in input order, padded to the longest of each plus `extra` pad tokens.
Tensor embed_unsorted(Context& ctx, const BertEncoder& encoder,
                      const std::vector<std::string>& texts, std::int64_t extra) {
  const std::int64_t d = encoder.dim(), count = static_cast<std::int64_t>(texts.size());
  const std::int32_t pad = encoder.tokenizer().pad_id();
  Tensor out(DType::f32, {count, d});
  for (std::int64_t b0 = 0; b0 < count; b0 += 32) {
    std::vector<std::vector<std::int32_t>> ids;
    for (std::int64_t i = b0; i < std::min(count, b0 + 32); ++i)
      ids.push_back(encoder.tokenizer().encode(texts[static_cast<std::size_t>(i)]));
    TokenBatch batch = pad_batch(ids, pad);
    if (extra > 0) {
      const std::int64_t n =
          std::min(batch.seq_len + extra, encoder.config().max_position_embeddings);
      TokenBatch wider{.batch = batch.batch, .seq_len = n, .ids = {}, .lengths = batch.lengths};
      wider.ids.assign(static_cast<std::size_t>(batch.batch * n), pad);
      for (std::int64_t r = 0; r < batch.batch; ++r)
        std::copy_n(batch.ids.begin() + r * batch.seq_len, batch.seq_len,
                    wider.ids.begin() + r * n);
      batch = std::move(wider);
    }
    encoder.embed_batch(
        ctx, batch,
        TensorView::contiguous(out.data<float>() + b0 * d, DType::f32, {batch.batch, d}));
  }
  return out;
}

TEST_F(EncoderInvariance, EmbeddingsAloneEqualEveryBatchingBitwise) {
  HEADCOUNT_REQUIRE_MINILM();
  Context one({.threads = 1}), two({.threads = 2});
  const Tensor alone = encoder_->embed(one, texts_, {.batch_size = 1});
  struct Variant {
    const char* name;
    Tensor got;
  };
  Variant variants[] = {
      {"sorted batches of 32, 2 threads", encoder_->embed(two, texts_, {.batch_size = 32})},
      {"unsorted batches of 32, 1 thread", embed_unsorted(one, *encoder_, texts_, 0)},
      {"unsorted batches of 32 padded 9 more, 2 threads",
       embed_unsorted(two, *encoder_, texts_, 9)},
  };
  std::printf("[ invariant] %zu sentences alone vs %zu batchings\n", texts_.size(),
              std::size(variants));
  for (const Variant& v : variants) {
    std::int64_t count = 0;
    const std::string rows = differing_rows(alone, v.got, texts_, &count);
    EXPECT_EQ(count, 0) << v.name << ": " << count
                        << " embeddings differ from the sentence's alone, e.g.\n"
                        << rows;
  }
}

// The last hidden state of every valid token (not only the pooled mean) is the same alone and in
// a batch padded 40 tokens past its longest sentence, with the reference kernel as well.
TEST_F(EncoderInvariance, ValidTokensHiddenStatesIgnorePadding) {
  HEADCOUNT_REQUIRE_MINILM();
  const std::vector<std::string> some(texts_.begin(),
                                      texts_.begin() + std::min<std::size_t>(8, texts_.size()));
  const std::int32_t pad = encoder_->tokenizer().pad_id();
  const std::int64_t d = encoder_->dim();
  std::vector<std::vector<std::int32_t>> ids;
  for (const std::string& s : some) ids.push_back(encoder_->tokenizer().encode(s));
  TokenBatch batch = pad_batch(ids, pad);
  const std::int64_t n = batch.seq_len + 40;
  TokenBatch wide{.batch = batch.batch,
                  .seq_len = n,
                  .ids = std::vector<std::int32_t>(static_cast<std::size_t>(batch.batch * n), pad),
                  .lengths = batch.lengths};
  for (std::int64_t r = 0; r < batch.batch; ++r)
    std::copy_n(batch.ids.begin() + r * batch.seq_len, batch.seq_len, wide.ids.begin() + r * n);
  for (Kernel kernel : {Kernel::streaming, Kernel::reference}) {
    Context one({.threads = 1}), two({.threads = 2});
    Tensor hidden(DType::f32, {wide.batch, n, d});
    encoder_->executor().forward(two, wide, hidden.view(), {.kernel = kernel});
    for (std::int64_t r = 0; r < wide.batch; ++r) {
      const std::int64_t len = wide.lengths[static_cast<std::size_t>(r)];
      const TokenBatch single = pad_batch({ids[static_cast<std::size_t>(r)]}, pad);
      Tensor h(DType::f32, {1, len, d});
      encoder_->executor().forward(one, single, h.view(), {.kernel = kernel});
      EXPECT_EQ(std::memcmp(h.data<const float>(), hidden.data<const float>() + r * n * d,
                            len * d * sizeof(float)),
                0)
          << "sentence " << r << " kernel "
          << (kernel == Kernel::streaming ? "streaming" : "reference");
    }
  }
}

}  // namespace
}  // namespace headcount::testing
