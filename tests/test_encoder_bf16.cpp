// The encoder with bf16 and int8 projections (EncoderLoadOptions{.dtype = bf16 | i8},
// `--dtype bf16 | int8`): embeddings bitwise the same alone or in batches, sorted or padded,
// on 1 or 2 threads (the bf16 GEMM rounds and the int8 GEMM quantises each row on its own,
// packed_gemm.h); close to the fp32 encoder's; and `--dtype` / parse_encoder_dtype refusing
// anything but fp32, bf16 and int8 with one line.
//
// Sentences: the first 256 STS-B test sentences (../shared when present) or of the committed
// data/pride-and-prejudice.txt; 64 under the sanitizers. ~3 s of CPU in Release.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "cli_runner.h"
#include "expect_error.h"
#include "headcount/encoder.h"
#include "headcount/sts.h"
#include "minilm_golden.h"
#include "sanitized.h"

namespace headcount::testing {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> sentences() {
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
    for (std::string line; std::getline(in, line) && out.size() < 256;)
      if (line.find_first_not_of(" \t\r") != std::string::npos) out.push_back(line);
  }
#if HEADCOUNT_TEST_SANITIZED
  const std::size_t keep = 64;
#else
  const std::size_t keep = 256;
#endif
  if (out.size() > keep) out.resize(keep);
  return out;
}

std::int64_t differing_rows(const Tensor& a, const Tensor& b) {
  std::int64_t count = 0;
  const std::int64_t d = a.size(1);
  for (std::int64_t r = 0; r < a.size(0); ++r)
    count += std::memcmp(a.data<const float>() + r * d, b.data<const float>() + r * d,
                         d * sizeof(float)) != 0;
  return count;
}

void expect_invariant(DType dtype) {
  const BertEncoder encoder = BertEncoder::load(default_model_dir(), {.dtype = dtype});
  ASSERT_EQ(encoder.dtype(), dtype);
  const std::vector<std::string> texts = sentences();
  const std::int64_t count = static_cast<std::int64_t>(texts.size()), d = encoder.dim();
  Context one({.threads = 1}), two({.threads = 2});
  const Tensor alone = encoder.embed(one, texts, {.batch_size = 1});
  const Tensor sorted =
      encoder.embed(two, texts, {.batch_size = 32});  // dynamic batching by length
  EXPECT_EQ(differing_rows(alone, sorted), 0) << "batches of 32 sorted by length, 2 threads";
  // Unsorted batches of 32, padded to their longest plus 7 more pad tokens, on 2 threads.
  Tensor padded(DType::f32, {count, d});
  const std::int32_t pad = encoder.tokenizer().pad_id();
  for (std::int64_t b0 = 0; b0 < count; b0 += 32) {
    std::vector<std::vector<std::int32_t>> ids;
    for (std::int64_t i = b0; i < std::min(count, b0 + 32); ++i)
      ids.push_back(encoder.tokenizer().encode(texts[static_cast<std::size_t>(i)]));
    TokenBatch batch = pad_batch(ids, pad);
    const std::int64_t n = std::min(batch.seq_len + 7, encoder.config().max_position_embeddings);
    TokenBatch wider{.batch = batch.batch, .seq_len = n, .ids = {}, .lengths = batch.lengths};
    wider.ids.assign(static_cast<std::size_t>(batch.batch * n), pad);
    for (std::int64_t r = 0; r < batch.batch; ++r)
      std::copy_n(batch.ids.begin() + r * batch.seq_len, batch.seq_len, wider.ids.begin() + r * n);
    encoder.embed_batch(
        two, wider,
        TensorView::contiguous(padded.data<float>() + b0 * d, DType::f32, {wider.batch, d}));
  }
  EXPECT_EQ(differing_rows(alone, padded), 0) << "unsorted padded batches of 32, 2 threads";
}

TEST(EncoderBf16, EmbeddingsAloneEqualBatchesAndThreadsBitwise) {
  HEADCOUNT_REQUIRE_MINILM();
  expect_invariant(DType::bf16);
}

// int8: each projection input row gets its own scale, so the same invariance holds.
TEST(EncoderInt8, EmbeddingsAloneEqualBatchesAndThreadsBitwise) {
  HEADCOUNT_REQUIRE_MINILM();
  expect_invariant(DType::i8);
}

double lowest_cosine_to_fp32(DType dtype) {
  const BertEncoder f32 = BertEncoder::load(default_model_dir());
  const BertEncoder other = BertEncoder::load(default_model_dir(), {.dtype = dtype});
  EXPECT_EQ(f32.dtype(), DType::f32);
  const std::vector<std::string> texts = sentences();
  Context ctx({.threads = 2});
  const Tensor a = f32.embed(ctx, texts), b = other.embed(ctx, texts);
  EXPECT_NE(differing_rows(a, b), 0) << dtype_name(dtype) << " must change the arithmetic";
  const std::int64_t d = a.size(1);
  double lowest = 1;
  for (std::int64_t r = 0; r < a.size(0); ++r) {
    double dot = 0;
    for (std::int64_t c = 0; c < d; ++c)
      dot +=
          static_cast<double>(a.data<const float>()[r * d + c]) * b.data<const float>()[r * d + c];
    lowest = std::min(lowest, dot);
  }
  std::printf("[ %-8s ] lowest cosine(fp32, %s) over %zu sentences: %.6f\n", dtype_name(dtype),
              dtype_name(dtype), texts.size(), lowest);
  return lowest;
}

// A guard against gross errors (a wrong pair layout or a lost depth block leaves cosines near
// 0), not an accuracy claim: the accuracy is the STS-B Spearman, measured by `headcount sts
// --dtype bf16` and stated in docs/performance.md. Each embedding is a unit vector; bf16 rounds
// every GEMM input to 8 significant bits (relative error <= 2^-9) and six layers compound it: the
// lowest cosine measured here was 0.999981 (avx512_bf16, 256 STS-B test sentences), so 0.99
// leaves room for other ISAs' different but equally accurate sums.
TEST(EncoderBf16, EmbeddingsCloseToFp32) {
  HEADCOUNT_REQUIRE_MINILM();
  EXPECT_GE(lowest_cosine_to_fp32(DType::bf16), 0.99);
}

// The same guard for int8 (the accuracy is again the STS-B Spearman in docs/performance.md): a
// row's quantisation step is max|x|/127, relative errors of about 2^-8 on the largest entries and
// more on small ones, compounded over six layers; the lowest cosine measured was 0.995080
// (avx512_bf16, vpdpbusd); every ISA gets the same integer sums, so 0.95 is a gross-error line.
TEST(EncoderInt8, EmbeddingsCloseToFp32) {
  HEADCOUNT_REQUIRE_MINILM();
  EXPECT_GE(lowest_cosine_to_fp32(DType::i8), 0.95);
}

TEST(EncoderBf16, DtypeNamesOtherThanFp32Bf16AndInt8AreErrors) {
  EXPECT_EQ(parse_encoder_dtype("fp32"), DType::f32);
  EXPECT_EQ(parse_encoder_dtype("bf16"), DType::bf16);
  EXPECT_EQ(parse_encoder_dtype("int8"), DType::i8);
  expect_error([] { parse_encoder_dtype("fp16"); },
               {"dtype", "expected fp32, bf16 or int8", "'fp16'"});
  expect_error([] { parse_encoder_dtype("f32"); },
               {"dtype", "expected fp32, bf16 or int8", "'f32'"});
  for (const std::string command :
       {"embed --dtype int4 -", "sts --dtype fp16 missing.tsv", "heads --json --dtype BF16"}) {
    const CliResult r = run_cli(command);
    EXPECT_EQ(r.exit_code, 2) << command << ": " << r.err;
    EXPECT_NE(r.err.find("--dtype: expected fp32, bf16 or int8, got "), std::string::npos)
        << command << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << command << ": " << r.err;
  }
}

}  // namespace
}  // namespace headcount::testing
