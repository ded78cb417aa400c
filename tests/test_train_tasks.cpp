// The training tasks: every batch a pure function of (seed, step, row); every target what the
// task's rule says, recomputed here by independent code (often a slower, more literal
// algorithm); a fixed validation set disjoint from training; tokens inside the vocabulary;
// bad configs are Errors naming the field; score_logits on logits whose answer is known.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "expect_error.h"
#include "headcount/train/task.h"
#include "nlohmann/json.hpp"
#include "train/tasks/random.h"
#include "train/tasks/synthetic_task.h"

namespace headcount::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using train::Batch;
using train::make_task;

std::vector<std::int32_t> row_tokens(const Batch& b, std::int64_t row) {
  return {b.tokens.begin() + row * b.seq_len, b.tokens.begin() + (row + 1) * b.seq_len};
}
std::vector<std::int32_t> row_targets(const Batch& b, std::int64_t row) {
  return {b.targets.begin() + row * b.seq_len, b.targets.begin() + (row + 1) * b.seq_len};
}

// A small UTF-8 text with 1-, 2-, 3- and 4-byte characters, written once per test binary and
// removed when it exits.
struct TempText {
  std::string path;
  TempText() {
    const fs::path p =
        fs::temp_directory_path() / ("headcount_tasks_text_" + std::to_string(::getpid()) + ".txt");
    std::ofstream out(p, std::ios::binary);
    const char* words[] = {
        "the ", "cat ", "caf\xc3\xa9 ", "\xe2\x80\x9cquoted\xe2\x80\x9d ", "\xf0\x9f\x98\x80 ",
        "sat\n"};
    std::uint64_t state = 7;
    for (int i = 0; i < 600; ++i) {
      state = train::tasks::mix64(state + 1);
      out << words[state % 6];
    }
    path = p.string();
  }
  ~TempText() { fs::remove(path); }
};
const std::string& small_text_path() {
  static const TempText text;
  return text.path;
}

// Independent UTF-8 decoding for the checks (the text above is valid by construction).
std::u32string decode(const std::string& s) {
  std::u32string out;
  for (std::size_t i = 0; i < s.size();) {
    const auto b = static_cast<unsigned char>(s[i]);
    const int n = b < 0x80 ? 1 : b < 0xe0 ? 2 : b < 0xf0 ? 3 : 4;
    char32_t c = n == 1 ? b : n == 2 ? (b & 0x1f) : n == 3 ? (b & 0x0f) : (b & 0x07);
    for (int k = 1; k < n; ++k) c = (c << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3f);
    out += c;
    i += n;
  }
  return out;
}
std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<json> all_configs() {
  return {
      {{"name", "char-lm"}, {"path", small_text_path()}, {"seq_len", 16}},
      {{"name", "copy"}, {"seq_len", 12}, {"alphabet", 5}},
      {{"name", "assoc-recall"}, {"num_pairs", 6}, {"num_queries", 4}, {"keys", 10}, {"values", 9}},
      {{"name", "assoc-recall"},
       {"num_pairs", 4},
       {"num_queries", 3},
       {"keys", 8},
       {"values", 8},
       {"seq_len", 23}},
      {{"name", "multi-relation"}, {"p", 7}, {"seq_len", 20}},
      {{"name", "multi-relation"},
       {"p", 11},
       {"seq_len", 24},
       {"offsets", {2, 5, 0}},
       {"coefficients", {3, -1, 2}}},
      {{"name", "multi-relation"}, {"p", 5}, {"seq_len", 30}, {"mode", "previous-occurrence"}},
  };
}

TEST(TrainTasks, CounterRngMatchesItsDefinition) {
  // splitmix64 along seed -> stream -> step -> row, computed independently in Python from the
  // definition in random.h (Stream::train = 1): the data order must never drift silently.
  train::tasks::CounterRng rng(42, train::tasks::Stream::train, 7, 3);
  EXPECT_EQ(rng.next(), 0xd001ded7fc077128ull);
  EXPECT_EQ(rng.next(), 0x28078045cf764c28ull);
  EXPECT_EQ(rng.below(10), 2u);  // floor(0x4c70a02fc34c3b43 * 10 / 2^64)
}

TEST(TrainTasks, BatchesArePureFunctionsOfSeedStepAndRow) {
  for (const json& config : all_configs()) {
    SCOPED_TRACE(config.dump());
    const auto task = make_task(config);
    const auto again = make_task(config);
    const Batch a = task->train_batch(5, 3, 8);
    const Batch b = again->train_batch(5, 3, 8);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.targets, b.targets);
    EXPECT_EQ(a.batch, 8);
    EXPECT_EQ(a.seq_len, task->seq_len());
    EXPECT_NE(task->train_batch(5, 4, 8).tokens, a.tokens);
    EXPECT_NE(task->train_batch(6, 3, 8).tokens, a.tokens);
    // Row r does not depend on the batch size: a smaller batch is a prefix of a larger one.
    const Batch small = task->train_batch(5, 3, 3);
    EXPECT_EQ(small.tokens,
              std::vector<std::int32_t>(a.tokens.begin(), a.tokens.begin() + 3 * a.seq_len));
    // Rows within a batch differ.
    EXPECT_NE(row_tokens(a, 0), row_tokens(a, 1));
  }
}

TEST(TrainTasks, TokensAndTargetsStayInsideTheVocabulary) {
  for (const json& config : all_configs()) {
    SCOPED_TRACE(config.dump());
    const auto task = make_task(config);
    for (std::int64_t step = 0; step < 20; ++step) {
      const Batch b = task->train_batch(1, step, 4);
      ASSERT_EQ(b.tokens.size(), static_cast<std::size_t>(4 * task->seq_len()));
      ASSERT_EQ(b.targets.size(), b.tokens.size());
      for (std::size_t i = 0; i < b.tokens.size(); ++i) {
        ASSERT_GE(b.tokens[i], 0);
        ASSERT_LT(b.tokens[i], task->vocab_size());
        ASSERT_TRUE(b.targets[i] == Batch::kIgnore ||
                    (b.targets[i] >= 0 && b.targets[i] < task->vocab_size()));
      }
      for (std::int64_t r = 0; r < 4; ++r) {
        const auto t = row_targets(b, r);
        EXPECT_TRUE(
            std::any_of(t.begin(), t.end(), [](std::int32_t x) { return x != Batch::kIgnore; }))
            << "row " << r << " scores nothing";
      }
    }
    EXPECT_TRUE(task->causal());
    const json d = task->describe();
    EXPECT_EQ(d.at("name"), config.at("name"));
    EXPECT_EQ(d.at("vocab"), task->vocab_size());
  }
}

TEST(TrainTasks, ValidationIsFixedAndWhole) {
  for (const json& config : all_configs()) {
    SCOPED_TRACE(config.dump());
    const auto task = make_task(config), again = make_task(config);
    const std::int64_t sequences = task->describe().at("validation_sequences").get<std::int64_t>();
    ASSERT_GT(sequences, 0);
    for (const std::int64_t batch : {7, 64}) {
      const std::int64_t count = task->validation_batches(batch);
      EXPECT_EQ(count, (sequences + batch - 1) / batch);
      std::int64_t rows = 0;
      for (std::int64_t i = 0; i < count; ++i) {
        const Batch v = task->validation_batch(i, batch), w = again->validation_batch(i, batch);
        EXPECT_EQ(v.tokens, w.tokens);
        EXPECT_EQ(v.targets, w.targets);
        EXPECT_EQ(v.batch, i + 1 < count ? batch : sequences - (count - 1) * batch);
        rows += v.batch;
      }
      EXPECT_EQ(rows, sequences);
      expect_error([&] { task->validation_batch(count, batch); }, {"validation_batch index"});
    }
  }
}

TEST(TrainTasks, SyntheticValidationNeverAppearsInTraining) {
  // Only 2^6 = 64 distinct copy prefixes: training draws every training-side one many times,
  // so an overlap with validation would show.
  const auto task =
      make_task({{"name", "copy"}, {"seq_len", 12}, {"alphabet", 2}, {"validation_sequences", 64}});
  std::set<std::vector<std::int32_t>> validation, training;
  for (std::int64_t i = 0; i < task->validation_batches(64); ++i) {
    const Batch v = task->validation_batch(i, 64);
    for (std::int64_t r = 0; r < v.batch; ++r) validation.insert(row_tokens(v, r));
  }
  for (std::int64_t step = 0; step < 100; ++step) {
    const Batch b = task->train_batch(9, step, 16);
    for (std::int64_t r = 0; r < b.batch; ++r) training.insert(row_tokens(b, r));
  }
  EXPECT_GE(validation.size(), 2u);
  EXPECT_GT(training.size(), 40u);
  EXPECT_EQ(validation.size() + training.size(), 64u) << "together they should cover every prefix";
  for (const auto& v : validation) EXPECT_EQ(training.count(v), 0u);
}

TEST(TrainTasks, CopyTargetsAreTheRepeatedPrefix) {
  const auto task = make_task({{"name", "copy"}, {"seq_len", 20}, {"alphabet", 7}});
  EXPECT_EQ(task->vocab_size(), 8);
  const Batch b = task->train_batch(3, 11, 16);
  for (std::int64_t r = 0; r < b.batch; ++r) {
    const auto x = row_tokens(b, r), y = row_targets(b, r);
    // The underlying sequence s = prefix, SEP, prefix (21 symbols); tokens = s[0..20), targets =
    // s[1..21).
    std::vector<std::int32_t> s(x.begin(), x.begin() + 10);
    s.push_back(7);
    s.insert(s.end(), x.begin(), x.begin() + 10);
    for (int t = 0; t < 20; ++t) {
      EXPECT_EQ(x[t], s[t]) << "row " << r << " t " << t;
      EXPECT_EQ(y[t], t < 10 ? Batch::kIgnore : s[t + 1]) << "row " << r << " t " << t;
    }
    for (int t = 0; t < 10; ++t) EXPECT_LT(x[t], 7);
  }
}

TEST(TrainTasks, AssocRecallScoresEachQueriedValue) {
  const std::int64_t pairs = 5, queries = 3, keys = 12, values = 9, seq_len = 21;
  const auto task = make_task({{"name", "assoc-recall"},
                               {"num_pairs", pairs},
                               {"num_queries", queries},
                               {"keys", keys},
                               {"values", values},
                               {"seq_len", seq_len}});
  EXPECT_EQ(task->vocab_size(), keys + values + 1);
  const std::int32_t filler = keys + values;
  for (std::int64_t step = 0; step < 10; ++step) {
    const Batch b = task->train_batch(2, step, 8);
    for (std::int64_t r = 0; r < b.batch; ++r) {
      const auto x = row_tokens(b, r), y = row_targets(b, r);
      std::set<std::int32_t> seen_keys, seen_values, queried;
      for (int i = 0; i < pairs; ++i) {
        ASSERT_LT(x[2 * i], keys);
        ASSERT_GE(x[2 * i + 1], keys);
        ASSERT_LT(x[2 * i + 1], filler);
        seen_keys.insert(x[2 * i]);
        seen_values.insert(x[2 * i + 1]);
        EXPECT_EQ(y[2 * i], Batch::kIgnore);
        EXPECT_EQ(y[2 * i + 1], Batch::kIgnore);
      }
      EXPECT_EQ(seen_keys.size(), static_cast<std::size_t>(pairs)) << "keys are distinct";
      EXPECT_EQ(seen_values.size(), static_cast<std::size_t>(pairs)) << "values are distinct";
      int scored = 0;
      for (std::int64_t t = 2 * pairs; t < seq_len; ++t) {
        if (y[t] == Batch::kIgnore) {
          // Not a query: filler or the answer right after a query.
          EXPECT_TRUE(x[t] == filler ||
                      (t > 2 * pairs && y[t - 1] != Batch::kIgnore && x[t] == y[t - 1]))
              << "row " << r << " t " << t;
          continue;
        }
        ++scored;
        EXPECT_EQ((t - 2 * pairs) % 2, 0) << "queries sit on pair slots";
        // The value is the one that followed this key in the pairs section (searched by brute
        // force).
        std::int32_t expected = -2;
        for (int i = 0; i < pairs; ++i)
          if (x[2 * i] == x[t]) expected = x[2 * i + 1];
        EXPECT_EQ(y[t], expected) << "row " << r << " t " << t;
        ASSERT_LT(t + 1, seq_len);
        EXPECT_EQ(x[t + 1], y[t]);
        EXPECT_TRUE(queried.insert(x[t]).second) << "a key is queried once";
      }
      EXPECT_EQ(scored, queries);
    }
  }
}

TEST(TrainTasks, MultiRelationTargetsFollowTheOffsets) {
  const std::int64_t p = 11, seq_len = 24;
  const std::vector<std::int64_t> offsets = {2, 5, 0}, coefficients = {3, -1, 2};
  const auto task = make_task({{"name", "multi-relation"},
                               {"p", p},
                               {"seq_len", seq_len},
                               {"offsets", offsets},
                               {"coefficients", coefficients}});
  const auto two = make_task(
      {{"name", "multi-relation"}, {"p", 7}, {"seq_len", 20}});  // default (x[t-1] - x[t-4]) mod 7
  for (std::int64_t step = 0; step < 5; ++step) {
    const Batch b = task->train_batch(4, step, 8);
    for (std::int64_t r = 0; r < b.batch; ++r) {
      const auto x = row_tokens(b, r), y = row_targets(b, r);
      for (std::int64_t t = 0; t < seq_len; ++t) {
        if (t < 5) {
          EXPECT_EQ(y[t], Batch::kIgnore);
          continue;
        }
        // 3 x[t-2] - x[t-5] + 2 x[t], reduced into [0, p) by adding p until non-negative.
        std::int64_t v = 3 * x[t - 2] - x[t - 5] + 2 * x[t];
        while (v < 0) v += p;
        EXPECT_EQ(y[t], v % p) << "row " << r << " t " << t;
      }
    }
    const Batch c = two->train_batch(4, step, 8);
    for (std::int64_t r = 0; r < c.batch; ++r) {
      const auto x = row_tokens(c, r), y = row_targets(c, r);
      for (std::int64_t t = 4; t < 20; ++t) EXPECT_EQ(y[t], (x[t - 1] - x[t - 4] + 7) % 7);
      for (std::int64_t t = 0; t < 4; ++t) EXPECT_EQ(y[t], Batch::kIgnore);
    }
  }
  EXPECT_EQ(two->describe().at("offsets"), json({1, 4}));
  EXPECT_EQ(two->describe().at("coefficients"), json({1, -1}));
}

TEST(TrainTasks, PreviousOccurrenceTargetsAreTheTokenAfterIt) {
  const auto task = make_task(
      {{"name", "multi-relation"}, {"p", 5}, {"seq_len", 30}, {"mode", "previous-occurrence"}});
  const Batch b = task->train_batch(8, 2, 16);
  for (std::int64_t r = 0; r < b.batch; ++r) {
    const auto x = row_tokens(b, r), y = row_targets(b, r);
    for (int t = 0; t < 30; ++t) {
      std::int32_t expected = Batch::kIgnore;
      for (int j = t - 1; j >= 0; --j)  // scan back for the previous occurrence
        if (x[j] == x[t]) {
          expected = x[j + 1];
          break;
        }
      EXPECT_EQ(y[t], expected) << "row " << r << " t " << t;
    }
  }
}

TEST(TrainTasks, CharLmWindowsComeFromTheirSplit) {
  const std::u32string text = decode(read_file(small_text_path()));
  const auto task = make_task({{"name", "char-lm"}, {"path", small_text_path()}, {"seq_len", 16}});
  const json d = task->describe();
  const std::u32string characters = decode(d.at("characters").get<std::string>());
  std::u32string sorted = text;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  EXPECT_EQ(characters, sorted);
  EXPECT_EQ(task->vocab_size(), static_cast<std::int64_t>(sorted.size()));
  const std::size_t validation_length =
      text.size() / 10;  // floor(0.1 n): n here is not a multiple of 10
  const std::size_t split = text.size() - validation_length;
  EXPECT_EQ(d.at("train_characters").get<std::size_t>(), split);
  const std::u32string train_part = text.substr(0, split), validation_part = text.substr(split);

  const auto window = [&](const Batch& b, std::int64_t r) {
    std::u32string w;
    for (std::int64_t t = 0; t < b.seq_len; ++t) w += characters[b.tokens[r * b.seq_len + t]];
    w += characters[b.targets[r * b.seq_len + b.seq_len - 1]];
    for (std::int64_t t = 0; t + 1 < b.seq_len; ++t)
      EXPECT_EQ(b.targets[r * b.seq_len + t], b.tokens[r * b.seq_len + t + 1])
          << "targets are the next character";
    return w;
  };
  for (std::int64_t step = 0; step < 10; ++step) {
    const Batch b = task->train_batch(1, step, 8);
    for (std::int64_t r = 0; r < b.batch; ++r)
      EXPECT_NE(train_part.find(window(b, r)), std::u32string::npos)
          << "a training window outside the training part";
  }
  const std::int64_t sequences = d.at("validation_sequences").get<std::int64_t>();
  EXPECT_EQ(sequences, static_cast<std::int64_t>((validation_length - 1) / 16));
  const Batch v = task->validation_batch(0, sequences);
  for (std::int64_t r = 0; r < sequences; ++r)
    EXPECT_EQ(window(v, r), validation_part.substr(16 * r, 17)) << r;
}

// E-G v3's repeated windows: half a window written twice, at the asked share; without the option
// (or at 0) the batches are the ones the task gave before it existed.
TEST(TrainTasks, CharLmRepeatedWindowsCopyTheirFirstHalf) {
  const json base{{"name", "char-lm"}, {"path", small_text_path()}, {"seq_len", 16}};
  json half = base, none = base;
  half["repeat_fraction"] = 0.5;
  none["repeat_fraction"] = 0.0;
  const auto plain = make_task(base), zero = make_task(none), task = make_task(half);
  for (std::int64_t step = 0; step < 4; ++step) {
    EXPECT_EQ(zero->train_batch(3, step, 8).tokens, plain->train_batch(3, step, 8).tokens);
    EXPECT_EQ(zero->train_batch(3, step, 8).targets, plain->train_batch(3, step, 8).targets);
  }
  const auto is_repeat = [](const Batch& b, std::int64_t r) {
    const auto* t = b.tokens.data() + r * b.seq_len;
    return std::equal(t, t + b.seq_len / 2, t + b.seq_len / 2);
  };
  const auto check_targets = [](const Batch& b, std::int64_t r) {
    for (std::int64_t t = 0; t + 1 < b.seq_len; ++t)
      ASSERT_EQ(b.targets[r * b.seq_len + t], b.tokens[r * b.seq_len + t + 1]);
  };
  std::int64_t repeated = 0, rows = 0;
  for (std::int64_t step = 0; step < 64; ++step) {
    const Batch b = task->train_batch(3, step, 8);
    const Batch p = plain->train_batch(3, step, 8);
    for (std::int64_t r = 0; r < b.batch; ++r, ++rows) {
      check_targets(b, r);
      // The window's start is the plain task's: the repeat draw comes after it.
      EXPECT_EQ(b.tokens[r * b.seq_len], p.tokens[r * p.seq_len]);
      if (is_repeat(b, r)) {
        ++repeated;
        // The last target continues the text after the first half.
        EXPECT_EQ(b.targets[r * b.seq_len + b.seq_len - 1], p.tokens[r * p.seq_len + 8]);
      }
    }
  }
  // Binomial(512, 0.5): 256 +- 11.3; 6 sd either side (a chance repeat of 8 characters of
  // text is far rarer than that margin).
  EXPECT_NEAR(static_cast<double>(repeated), 256.0, 68.0) << rows;
  // Held-out windows: every other one (w = 1, 3, ...), the same text as the plain task's.
  const Batch v = task->validation_batch(0, 6), pv = plain->validation_batch(0, 6);
  for (std::int64_t r = 0; r < 6; ++r) {
    check_targets(v, r);
    EXPECT_EQ(is_repeat(v, r), r % 2 == 1) << r;
    EXPECT_TRUE(std::equal(v.tokens.begin() + r * 16, v.tokens.begin() + r * 16 + 8,
                           pv.tokens.begin() + r * 16));
  }
}

// The claims protocol's dev/test halves of the held-out tail, and the bigram baseline recounted
// here from the text in the test's own loop.
TEST(TrainTasks, CharLmDevAndTestSplitTheTailAndCarryTheBigramBaseline) {
  const std::u32string text = decode(read_file(small_text_path()));
  const auto all = make_task({{"name", "char-lm"}, {"path", small_text_path()}, {"seq_len", 16}});
  const auto dev = make_task(
      {{"name", "char-lm"}, {"path", small_text_path()}, {"seq_len", 16}, {"split", "dev"}});
  const auto test = make_task(
      {{"name", "char-lm"}, {"path", small_text_path()}, {"seq_len", 16}, {"split", "test"}});
  const std::int64_t windows = all->describe().at("validation_sequences");
  const std::int64_t n_dev = dev->describe().at("validation_sequences"),
                     n_test = test->describe().at("validation_sequences");
  EXPECT_EQ(n_dev, windows / 2);
  EXPECT_EQ(n_dev + n_test, windows);
  const Batch every = all->validation_batch(0, windows);
  const Batch d = dev->validation_batch(0, n_dev), t = test->validation_batch(0, n_test);
  EXPECT_TRUE(std::equal(d.tokens.begin(), d.tokens.end(), every.tokens.begin()));
  EXPECT_TRUE(std::equal(t.tokens.begin(), t.tokens.end(), every.tokens.begin() + 16 * n_dev));
  // Bigram: add-0.1 counts over the training part's pairs, scored on the test windows.
  const json desc = test->describe();
  const std::string characters = desc.at("characters");
  const std::u32string vocab = decode(characters);
  const std::size_t train_length = desc.at("train_characters").get<std::size_t>();
  std::map<std::pair<char32_t, char32_t>, double> pairs;
  std::map<char32_t, double> firsts;
  for (std::size_t i = 0; i + 1 < train_length; ++i) {
    pairs[{text[i], text[i + 1]}] += 1;
    firsts[text[i]] += 1;
  }
  double sum = 0;
  for (std::size_t i = 0; i < t.tokens.size(); ++i) {
    const char32_t a = vocab[static_cast<std::size_t>(t.tokens[i])],
                   b = vocab[static_cast<std::size_t>(t.targets[i])];
    sum -= std::log((pairs[{a, b}] + 0.1) / (firsts[a] + 0.1 * static_cast<double>(vocab.size())));
  }
  EXPECT_NEAR(desc.at("bigram_loss").get<double>(), sum / static_cast<double>(t.tokens.size()),
              1e-12);
  expect_error(
      [] {
        make_task({{"name", "char-lm"}, {"split", "holdout"}});
      },
      {"task.split", "holdout"});
  expect_error(
      [] {
        make_task({{"name", "char-lm"}, {"split", "dev"}, {"validation_sequences", 4}});
      },
      {"task.validation_sequences"});
}

TEST(TrainTasks, CharLmDefaultTextIsTheCommittedNovel) {
  const auto task = make_task({{"name", "char-lm"}});
  EXPECT_EQ(task->vocab_size(), 76);
  EXPECT_EQ(task->seq_len(), 64);
  const json d = task->describe();
  EXPECT_EQ(d.at("text_characters"), 676639);
  EXPECT_EQ(d.at("train_characters"), 608976);
  EXPECT_EQ(d.at("validation_sequences"), (67663 - 1) / 64);
  EXPECT_EQ(d.at("path"), "data/pride-and-prejudice.txt");  // no directory of this machine
}

TEST(TrainTasks, BadConfigsAreErrorsNamingTheField) {
  const fs::path dir =
      fs::temp_directory_path() / ("headcount_tasks_bad_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string empty = (dir / "empty.txt").string(), short_text = (dir / "short.txt").string(),
                    latin1 = (dir / "latin1.txt").string();
  std::ofstream(empty).close();
  std::ofstream(short_text) << "far too short for a window of 64";
  std::ofstream(latin1) << std::string(500, 'a') << "caf\xe9" << std::string(500, 'b');
  const std::pair<json, std::vector<const char*>> cases[] = {
      {json::array(), {"task", "JSON object"}},
      {{{"seq_len", 8}}, {"task.name", "char-lm", "nothing"}},
      {{{"name", "sorting"}}, {"task.name", "copy", "\"sorting\""}},
      {{{"name", "copy"}, {"seq_len", 7}}, {"task.seq_len", "even", "7"}},
      {{{"name", "char-lm"}, {"seq_len", 15}, {"repeat_fraction", 0.5}},
       {"task.seq_len", "even", "15"}},
      {{{"name", "char-lm"}, {"repeat_fraction", 1.5}}, {"task.repeat_fraction", "1.5"}},
      {{{"name", "copy"}, {"seq_len", "32"}}, {"task.seq_len", "integer", "\"32\""}},
      {{{"name", "copy"}, {"seq_len", 2}}, {"task.seq_len", "[4, 65536]", "2"}},
      {{{"name", "copy"}, {"alphabet", 2}, {"seq_len", 8}}, {"task.alphabet", "64 distinct"}},
      {{{"name", "copy"}, {"seq_lenn", 8}}, {"task.seq_lenn", "unknown field", "seq_len"}},
      {{{"name", "assoc-recall"}, {"num_pairs", 8}, {"num_queries", 9}},
       {"task.num_queries", "[1, 8]", "9"}},
      {{{"name", "assoc-recall"}, {"num_pairs", 8}, {"keys", 4}}, {"task.keys", "[8,", "4"}},
      {{{"name", "assoc-recall"}, {"num_pairs", 4}, {"seq_len", 10}},
       {"task.seq_len", "[16,", "10"}},
      {{{"name", "multi-relation"}, {"offsets", {1, 1}}}, {"task.offsets", "distinct"}},
      {{{"name", "multi-relation"}, {"offsets", {1, 40}}}, {"task.offsets", "below seq_len = 32"}},
      {{{"name", "multi-relation"}, {"offsets", {1, 2, 3}}, {"coefficients", {1, 1}}},
       {"task.coefficients", "3 coefficients", "2"}},
      {{{"name", "multi-relation"}, {"p", 5}, {"coefficients", {1, 5}}},
       {"task.coefficients", "[-4, 4]"}},
      {{{"name", "multi-relation"}, {"mode", "next"}},
       {"task.mode", "previous-occurrence", "\"next\""}},
      {{{"name", "multi-relation"}, {"mode", "previous-occurrence"}, {"offsets", {1, 2}}},
       {"task.offsets"}},
      {{{"name", "char-lm"}, {"path", (dir / "missing.txt").string()}},
       {"task.path", "missing.txt", "cannot open"}},
      {{{"name", "char-lm"}, {"path", empty}}, {"task.path", "empty.txt", "0 characters"}},
      {{{"name", "char-lm"}, {"path", short_text}}, {"task.path", "short.txt", "at least"}},
      {{{"name", "char-lm"}, {"path", latin1}},
       {"task.path", "UTF-8", "continuation byte at offset 504"}},
      {{{"name", "char-lm"}, {"validation_fraction", 0.9}},
       {"task.validation_fraction", "[0.01, 0.5]"}},
  };
  for (const auto& [config, parts] : cases) {
    SCOPED_TRACE(config.dump());
    try {
      make_task(config);
      ADD_FAILURE() << "no Error";
    } catch (const Error& e) {
      for (const char* part : parts)
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  }
  const auto task = make_task({{"name", "copy"}});
  expect_error([&] { task->train_batch(1, 0, 0); }, {"train_batch batch", "got 0"});
  expect_error([&] { task->train_batch(1, -1, 4); }, {"train_batch step", "-1"});
  fs::remove_all(dir);
  EXPECT_EQ(train::task_names(),
            (std::vector<std::string>{"char-lm", "copy", "assoc-recall", "multi-relation", "esp",
                                      "multi-retrieval"}));
}

TEST(TrainTasks, ScoreLogitsOnHandMadeLogits) {
  // 2 rows x 3 positions, vocab 4. Row 0: position 0 ignored; position 1 logits (0, ln 3, 0, 0)
  // with target 1 (right): -log(3/6) = ln 2; position 2 logits all 5 with target 2 (a tie: the
  // argmax is the first, 0, so wrong): ln 4. Row 1: position 0 (10, 0, 0, 0) target 0 (right):
  // log(1 + 3 e^-10); positions 1 and 2 ignored.
  const Batch b{
      .batch = 2, .seq_len = 3, .tokens = {0, 0, 0, 0, 0, 0}, .targets = {-1, 1, 2, 0, -1, -1}};
  const float l3 = std::log(3.0f);
  const std::vector<float> logits = {9,  9, 9, 9, 0, l3, 0, 0, 5,  5,  5,  5,
                                     10, 0, 0, 0, 1, 2,  3, 4, -1, -2, -3, -4};
  const train::TaskMetrics m = train::score_logits(b, logits.data(), 4);
  EXPECT_EQ(m.scored, 3);
  // Expected in double; the logits are floats (ln 3 rounded to float: |error| <= 2^-24 ln 3,
  // which moves the loss by at most that times d(loss)/d(logit) <= 1), so 1e-7 bounds it.
  const double expected = (std::log(3.0 + std::exp(static_cast<double>(l3))) - l3 + std::log(4.0) +
                           std::log1p(3 * std::exp(-10.0))) /
                          3;
  EXPECT_NEAR(m.loss, expected, 1e-7);
  EXPECT_NEAR(m.loss, (std::log(2.0) + std::log(4.0) + std::log1p(3 * std::exp(-10.0))) / 3, 1e-7);
  EXPECT_DOUBLE_EQ(m.accuracy, 2.0 / 3.0);
  EXPECT_DOUBLE_EQ(m.sequence_accuracy, 0.5);  // row 0 has a wrong position, row 1 is right
  // Huge logits do not overflow (max subtracted first).
  const Batch one{.batch = 1, .seq_len = 1, .tokens = {0}, .targets = {1}};
  const std::vector<float> big = {1e30f, 1e30f};
  EXPECT_NEAR(train::score_logits(one, big.data(), 2).loss, std::log(2.0), 1e-12);
  const Batch bad{.batch = 1, .seq_len = 1, .tokens = {0}, .targets = {4}};
  expect_error([&] { train::score_logits(bad, big.data(), 2); }, {"target", "[0, 2)", "4"});
}

}  // namespace
}  // namespace headcount::testing
