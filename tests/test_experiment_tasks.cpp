// The pieces issue 11's experiments add to training: the multi-relation variant that combines a
// content-addressed relation with a fixed offset, the multi-retrieval task (blur's tuple targets),
// the esp task (its graphs and rows checked by independent code), the per-head probe (on P built by
// hand and on a model whose weights make one head look at offset 1), and the MHA -> GQA mean-pool
// conversion.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "expect_error.h"
#include "headcount/compress.h"
#include "headcount/context.h"
#include "headcount/train/definition.h"
#include "headcount/train/head_probe.h"
#include "headcount/train/model.h"
#include "headcount/train/task.h"
#include "nlohmann/json.hpp"

namespace headcount::testing {
namespace {

using nlohmann::json;
using train::Batch;
using train::make_task;

TEST(ExperimentTasks, PreviousOccurrenceOffsetCombinesBothRelations) {
  for (const json& config : {json{{"name", "multi-relation"},
                                  {"p", 5},
                                  {"seq_len", 30},
                                  {"mode", "previous-occurrence-offset"}},
                             json{{"name", "multi-relation"},
                                  {"p", 7},
                                  {"seq_len", 24},
                                  {"mode", "previous-occurrence-offset"},
                                  {"offsets", {3}},
                                  {"coefficients", {2}}}}) {
    SCOPED_TRACE(config.dump());
    const auto task = make_task(config);
    const std::int64_t p = config.at("p"), T = config.at("seq_len");
    const std::int64_t a = config.contains("offsets") ? 3 : 1,
                       c = config.contains("offsets") ? 2 : -1;
    const Batch b = task->train_batch(3, 1, 16);
    std::int64_t scored = 0;
    for (std::int64_t r = 0; r < b.batch; ++r) {
      const std::int32_t* x = b.tokens.data() + r * T;
      const std::int32_t* y = b.targets.data() + r * T;
      for (std::int64_t t = 0; t < T; ++t) {
        std::int64_t expected = Batch::kIgnore;
        for (std::int64_t j = t - 1; j >= 0 && t >= a; --j)  // literal backward scan
          if (x[j] == x[t]) {
            std::int64_t v = x[j + 1] + c * x[t - a];
            while (v < 0) v += p;
            expected = v % p;
            break;
          }
        EXPECT_EQ(y[t], expected) << "row " << r << " t " << t;
        scored += expected != Batch::kIgnore;
      }
    }
    EXPECT_GT(scored, b.batch * T / 2);
    EXPECT_EQ(task->describe().at("mode"), "previous-occurrence-offset");
  }
  expect_error(
      [] {
        make_task(
            {{"name", "multi-relation"}, {"mode", "previous-occurrence-offset"}, {"offsets", {0}}});
      },
      {"task.offsets", "[1,"});
}

// multi-retrieval (blur's second design): every target recomputed from the tokens by a literal
// reading of the definition, for the three modes; the validation rows too.
TEST(ExperimentTasks, MultiRetrievalTargetsAreTheFetchedTuples) {
  struct Case {
    json config;
    std::int64_t p, keys, vocab;
  };
  const std::vector<Case> cases = {
      {{{"name", "multi-retrieval"}, {"p", 8}, {"seq_len", 20}}, 8, 1, 64},
      {{{"name", "multi-retrieval"}, {"mode", "unordered"}, {"p", 5}, {"seq_len", 20}}, 5, 1, 25},
      {{{"name", "multi-retrieval"}, {"p", 4}, {"offsets", {1, 3, 6}}, {"seq_len", 24}}, 4, 1, 64},
      {{{"name", "multi-retrieval"},
        {"mode", "key-value"},
        {"p", 4},
        {"keys", 6},
        {"offsets", {2}},
        {"seq_len", 24}},
       4,
       6,
       24}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.config.dump());
    const auto task = make_task(c.config);
    EXPECT_EQ(task->vocab_size(), c.vocab);
    const std::string mode = c.config.value("mode", "ordered");
    const auto offsets =
        c.config.value("offsets", mode == "key-value" ? std::vector<std::int64_t>{1}
                                                      : std::vector<std::int64_t>{1, 4});
    const std::int64_t T = c.config.at("seq_len"),
                       first = *std::max_element(offsets.begin(), offsets.end());
    for (const Batch& b : {task->train_batch(5, 2, 16), task->validation_batch(0, 16)}) {
      std::int64_t scored = 0;
      for (std::int64_t r = 0; r < b.batch; ++r) {
        const std::int32_t* x = b.tokens.data() + r * T;
        const std::int32_t* y = b.targets.data() + r * T;
        for (std::int64_t t = 0; t < T; ++t) {
          ASSERT_TRUE(x[t] >= 0 && x[t] < c.p * c.keys);
          std::int64_t expected = Batch::kIgnore;
          if (t >= first && mode == "key-value") {
            for (std::int64_t j = t - 1; j >= 0; --j)
              if (x[j] / c.p == x[t] / c.p) {
                expected = (x[j] % c.p) * c.p + x[t - offsets[0]] % c.p;
                break;
              }
          } else if (t >= first) {
            std::vector<std::int64_t> v;
            for (const std::int64_t a : offsets) v.push_back(x[t - a]);
            if (mode == "unordered") std::sort(v.begin(), v.end());
            expected = 0;
            for (const std::int64_t d : v) expected = expected * c.p + d;
          }
          EXPECT_EQ(y[t], expected) << "row " << r << " t " << t;
          scored += expected != Batch::kIgnore;
        }
      }
      EXPECT_GT(scored, b.batch * (T - first) / 2);
    }
    EXPECT_EQ(task->describe().at("mode"), mode);
  }
  expect_error(
      [] {
        make_task({{"name", "multi-retrieval"}, {"offsets", {2, 2}}});
      },
      {"task.offsets", "distinct"});
  expect_error(
      [] {
        make_task({{"name", "multi-retrieval"}, {"offsets", {1, 32}}});
      },
      {"task.offsets", "below seq_len = 32"});
  expect_error(
      [] {
        make_task({{"name", "multi-retrieval"}, {"p", 20}, {"offsets", {1, 2, 3}}});
      },
      {"task.p", "4096 classes", "20"});
  expect_error(
      [] {
        make_task({{"name", "multi-retrieval"}, {"mode", "key-value"}, {"offsets", {1, 2}}});
      },
      {"task.offsets"});
  expect_error([] { make_task({{"name", "multi-retrieval"}, {"keys", 4}}); }, {"task.keys"});
}

// Kahn's algorithm: whether the arcs leave no cycle.
bool acyclic(std::int64_t n, const std::vector<std::pair<int, int>>& arcs) {
  std::vector<int> indegree(static_cast<std::size_t>(n), 0);
  for (const auto& [u, v] : arcs) ++indegree[static_cast<std::size_t>(v)];
  std::vector<int> ready;
  for (int i = 0; i < n; ++i)
    if (indegree[static_cast<std::size_t>(i)] == 0) ready.push_back(i);
  int removed = 0;
  while (!ready.empty()) {
    const int u = ready.back();
    ready.pop_back();
    ++removed;
    for (const auto& [a, b] : arcs)
      if (a == u && --indegree[static_cast<std::size_t>(b)] == 0) ready.push_back(b);
  }
  return removed == n;
}

// The dev and test splits (E-B picks on one and reports the other): each is the half of the
// held-out side its hash bit says, so no row is in both, none is a training row, and the
// training batches are those of the task without a split.
TEST(ExperimentTasks, MultiRetrievalDevAndTestAreDisjointHalvesOfTheHeldOutSide) {
  const json base{
      {"name", "multi-retrieval"},  {"mode", "key-value"}, {"p", 4}, {"keys", 4}, {"seq_len", 12},
      {"validation_sequences", 256}};
  json dev_config = base, test_config = base;
  dev_config["split"] = "dev";
  test_config["split"] = "test";
  const auto all = make_task(base), dev = make_task(dev_config), test = make_task(test_config);
  EXPECT_EQ(dev->describe().at("split"), "dev");
  EXPECT_EQ(test->describe().at("split"), "test");
  const auto rows = [](const train::Task& task) {
    std::set<std::vector<std::int32_t>> out;
    const Batch b = task.validation_batch(0, 256);
    for (std::int64_t r = 0; r < b.batch; ++r)
      out.emplace(b.tokens.begin() + r * b.seq_len, b.tokens.begin() + (r + 1) * b.seq_len);
    return out;
  };
  const auto dev_rows = rows(*dev), test_rows = rows(*test);
  EXPECT_GT(dev_rows.size(), 200u);  // 256 draws from 4^24 sequences: almost all distinct
  EXPECT_GT(test_rows.size(), 200u);
  for (const auto& row : dev_rows) EXPECT_EQ(test_rows.count(row), 0u);
  for (std::int64_t step = 0; step < 8; ++step) {
    const Batch plain = all->train_batch(3, step, 32), split = dev->train_batch(3, step, 32);
    EXPECT_EQ(plain.tokens, split.tokens);
    for (std::int64_t r = 0; r < split.batch; ++r) {
      const std::vector<std::int32_t> row(split.tokens.begin() + r * split.seq_len,
                                          split.tokens.begin() + (r + 1) * split.seq_len);
      EXPECT_EQ(dev_rows.count(row) + test_rows.count(row), 0u);
    }
  }
  json bad = base;
  bad["split"] = "train";
  expect_error([&] { make_task(bad); }, {"task.split", "train"});
}

TEST(ExperimentTasks, EspGraphsAndRowsFollowTheDefinition) {
  for (const char* graph : {"cyclic", "acyclic"}) {
    for (const std::int64_t seed : {1, 2, 3}) {
      SCOPED_TRACE(std::string(graph) + " seed " + std::to_string(seed));
      const json config{{"name", "esp"}, {"graph", graph}, {"graph_seed", seed},
                        {"vertices", 8}, {"arcs", 12},     {"seq_len", 16}};
      const auto task = make_task(config);
      EXPECT_EQ(task->vocab_size(), 9);
      const json d = task->describe();
      std::vector<std::pair<int, int>> arcs;
      std::set<std::pair<int, int>> pairs;
      for (const json& arc : d.at("arcs")) {
        const int u = arc.at(0), v = arc.at(1);
        ASSERT_TRUE(u >= 0 && u < 8 && v >= 0 && v < 8 && u != v);
        EXPECT_TRUE(pairs.insert({std::min(u, v), std::max(u, v)}).second) << "2-cycle or repeat";
        arcs.emplace_back(u, v);
      }
      EXPECT_EQ(arcs.size(), 12u);
      EXPECT_EQ(acyclic(8, arcs), std::string(graph) == "acyclic");
      std::map<int, int> head_of;  // tail -> heads seen, for the row check below
      const auto is_arc = [&](int u, int v) {
        return std::find(arcs.begin(), arcs.end(), std::pair<int, int>{u, v}) != arcs.end();
      };
      for (const Batch& b : {task->train_batch(seed, 0, 32), task->validation_batch(0, 32)}) {
        for (std::int64_t r = 0; r < b.batch; ++r) {
          const std::int32_t* x = b.tokens.data() + r * 16;
          const std::int32_t* y = b.targets.data() + r * 16;
          EXPECT_EQ(x[15], 8);  // the query token
          std::set<int> seen(x, x + 15);
          ASSERT_EQ(seen.size(), 2u) << "exactly the two endpoints";
          const int a = *seen.begin(), c = *seen.rbegin();
          for (int t = 0; t < 15; ++t) EXPECT_EQ(y[t], Batch::kIgnore);
          EXPECT_TRUE((is_arc(a, c) && y[15] == c) || (is_arc(c, a) && y[15] == a))
              << a << " " << c << " -> " << y[15];
        }
      }
      EXPECT_NE(task->train_batch(seed, 0, 8).tokens, task->train_batch(seed + 1, 0, 8).tokens);
    }
  }
  // The two families are different graphs on the same counts.
  EXPECT_NE(make_task({{"name", "esp"}, {"graph", "cyclic"}})->describe().at("arcs"),
            make_task({{"name", "esp"}, {"graph", "acyclic"}})->describe().at("arcs"));
  expect_error(
      [] {
        make_task({{"name", "esp"}, {"vertices", 4}, {"arcs", 7}});
      },
      {"task.arcs", "[4, 6]", "7"});
  expect_error([] { make_task({{"name", "esp"}, {"seq_len", 6}}); }, {"task.seq_len", "6"});
  expect_error(
      [] {
        make_task({{"name", "esp"}, {"graph", "tree"}});
      },
      {"task.graph", "acyclic", "\"tree\""});
}

TEST(ExperimentProbe, HandBuiltProbabilities) {
  // Two heads over T = 6: head 0 all mass on offset 1 (row 0 on itself), head 1 uniform over
  // the causal row. Scored positions: t = 2, 4 of row 0.
  const std::int64_t T = 6;
  Tensor P(DType::f32, {1, 2, T, T});
  float* p = P.data<float>();
  for (std::int64_t t = 0; t < T; ++t) {
    p[(0 * T + t) * T + (t == 0 ? 0 : t - 1)] = 1.0f;
    for (std::int64_t s = 0; s <= t; ++s) p[(1 * T + t) * T + s] = 1.0f / static_cast<float>(t + 1);
  }
  Batch b{
      .batch = 1, .seq_len = T, .tokens = {3, 1, 3, 2, 1, 0}, .targets = {-1, -1, 7, -1, 5, -1}};
  std::vector<double> sums;
  std::vector<std::int64_t> counts;
  std::int64_t queries = 0;
  train::accumulate_head_probe(P, b,
                               {train::offset_relation(1), train::offset_relation(3),
                                train::previous_occurrence_relation(1)},
                               sums, counts, queries);
  EXPECT_EQ(queries, 2);
  // Per head: [entropy, offset 1, offset 3, previous occurrence + 1]. t = 2: x = 3, previous
  // occurrence j = 0, j + 1 = 1 (= offset 1); t = 4: x = 1, j = 1, j + 1 = 2.
  EXPECT_NEAR(sums[0], 0.0, 1e-12);
  EXPECT_NEAR(sums[1], 2.0, 1e-6);
  EXPECT_EQ(counts[2], 1);  // offset 3 exists only at t = 4
  EXPECT_NEAR(sums[2], 0.0, 1e-6);
  EXPECT_NEAR(sums[3], 1.0, 1e-6);  // t = 2: on 1; t = 4: 2 is not 3
  EXPECT_NEAR(sums[4], std::log(3.0) + std::log(5.0), 1e-6);
  EXPECT_NEAR(sums[5], 1.0 / 3 + 1.0 / 5, 1e-6);
  EXPECT_NEAR(sums[6], 1.0 / 5, 1e-6);
  EXPECT_NEAR(sums[7], 1.0 / 3 + 1.0 / 5, 1e-6);
}

TEST(ExperimentProbe, ModelWhoseHeadLooksAtOffsetOne) {
  // d_model 16, heads 2 of head_dim 16, pos_emb[t] = e_t, tok_emb 0. LN1(e_t) = a (e_t - 1/16),
  // a^2 = 1 / (1/16 * 15/16). Head 0: W_q = beta I, W_k = the shift e_i -> e_{i+1}, so its score
  // is scale * beta * a^2 [s = t - 1] + (terms equal for every s <= t < 15): with
  // scale 1/4, beta 10 the offset-1 key leads by 42.7, all other keys share the rest
  // (<= 11 e^-42.7 of the mass). Head 1: W_q = 0, so uniform over the causal row.
  const auto task = make_task({{"name", "multi-relation"}, {"p", 7}, {"seq_len", 12}});
  train::ModelConfig mc{
      .vocab = 7, .context = 12, .layers = 1, .d_model = 16, .heads = 2, .head_dim = 16};
  train::Model model(mc, 3);
  const std::int64_t W = (2 + 2 * 2) * 16;
  for (train::Parameter& prm : model.parameters()) {
    float* v = prm.value.data<float>();
    if (prm.name == "tok_emb") std::fill(v, v + prm.value.numel(), 0.0f);
    if (prm.name == "pos_emb") {
      std::fill(v, v + prm.value.numel(), 0.0f);
      for (int t = 0; t < 12; ++t) v[t * 16 + t] = 1.0f;
    }
    if (prm.name == "blocks.0.attn.w_qkv") {
      for (int i = 0; i < 16; ++i)
        for (int c = 0; c < 4 * 16; ++c) v[i * W + c] = 0.0f;  // Q of both heads, K of both
      for (int i = 0; i < 16; ++i) v[i * W + i] = 10.0f;       // head 0's Q = 10 I
      for (int i = 0; i + 1 < 16; ++i) v[i * W + 2 * 16 + i + 1] = 1.0f;  // head 0's K: shift
    }
  }
  Context ctx;
  const auto result = train::probe_heads(
      ctx, model, *task, {train::offset_relation(1), train::offset_relation(4)}, 64, 2);
  ASSERT_EQ(result.heads.size(), 2u);
  EXPECT_GT(result.heads[0].fractions[0], 1.0 - 1e-6);
  EXPECT_LT(result.heads[0].entropy, 1e-6);
  // Head 1 uniform: scored t in [4, 11], each row equally often, so the means are the averages
  // of 1/(t+1) and ln(t+1) over t = 4..11; float P gives ~1e-7 per entry.
  double frac = 0, ent = 0;
  for (int t = 4; t < 12; ++t) frac += 1.0 / (t + 1) / 8, ent += std::log(t + 1.0) / 8;
  EXPECT_NEAR(result.heads[1].fractions[0], frac, 1e-5);
  EXPECT_NEAR(result.heads[1].fractions[1], frac, 1e-5);
  EXPECT_NEAR(result.heads[1].entropy, ent, 1e-5);
  EXPECT_EQ(result.queries, 2 * 64 * 8);
}

// The experiments' conversion: the trained model's definition mean-pooled, read back.
train::Model convert_kv_heads(const train::Model& model, std::int64_t g) {
  return train::from_weights(
      model::convert_kv_heads(train::to_weights(model), g, KvConvertMethod::mean));
}

std::vector<float> logits_of(train::Model& model, const Batch& b) {
  Context ctx;
  std::vector<float> out(static_cast<std::size_t>(b.batch * b.seq_len * model.config().vocab));
  model.forward(ctx, b, out.data(), {.kernel = Kernel::reference});
  return out;
}

TEST(ExperimentConvert, SameKvHeadsIsTheIdentityAndGroupsAreMeans) {
  const auto task = make_task({{"name", "multi-relation"}, {"p", 7}, {"seq_len", 12}});
  train::ModelConfig mc{.vocab = 7, .context = 12, .layers = 2, .d_model = 32, .heads = 4};
  train::Model model(mc, 5);
  for (train::Parameter& prm : model.parameters())  // non-zero biases, so they are checked too
    if (prm.name.ends_with("b_qkv"))
      for (std::int64_t i = 0; i < prm.value.numel(); ++i)
        prm.value.data<float>()[i] = 0.01f * static_cast<float>(i % 13) - 0.05f;
  train::Model same = convert_kv_heads(model, 4);
  for (std::size_t i = 0; i < model.parameters().size(); ++i) {
    const Tensor &a = model.parameters()[i].value, &b = same.parameters()[i].value;
    ASSERT_EQ(a.shape(), b.shape());
    EXPECT_EQ(
        0, std::memcmp(a.data<float>(), b.data<float>(), 4 * static_cast<std::size_t>(a.numel())));
  }
  const Batch b = task->validation_batch(0, 4);
  EXPECT_EQ(logits_of(model, b), logits_of(same, b));
  // G = 1: K (and V) column d of the new head = the mean of the four old heads' column d.
  train::Model mqa = convert_kv_heads(model, 1);
  EXPECT_EQ(mqa.config().kv_heads, 1);
  const std::int64_t hd = 8, old_w = 12 * hd, new_w = 6 * hd;
  ASSERT_EQ(mqa.parameters()[4].name, "blocks.0.attn.w_qkv");
  const float* o = model.parameters()[4].value.data<float>();
  const float* n = mqa.parameters()[4].value.data<float>();
  for (std::int64_t r = 0; r < 32; ++r)
    for (std::int64_t c = 0; c < new_w; ++c) {
      double expected = 0;
      if (c < 4 * hd) {
        expected = o[r * old_w + c];
      } else {
        const std::int64_t part = c < 5 * hd ? 0 : 1, d = (c - 4 * hd) % hd;  // K or V
        for (int h = 0; h < 4; ++h)
          expected += o[r * old_w + 4 * hd + part * 4 * hd + h * hd + d] / 4.0;
      }
      EXPECT_NEAR(n[r * new_w + c], expected, 1e-7 * (1 + std::fabs(expected)));
    }
  expect_error([&] { convert_kv_heads(model, 3); },
               {"--kv-heads", "a divisor of layer 0's 4 K/V heads", "3"});
}

TEST(ExperimentConvert, IdenticalHeadsInAGroupKeepTheOutputs) {
  const auto task = make_task({{"name", "multi-relation"}, {"p", 7}, {"seq_len", 12}});
  train::ModelConfig mc{.vocab = 7, .context = 12, .layers = 2, .d_model = 32, .heads = 4};
  train::Model model(mc, 9);
  const std::int64_t hd = 8, W = 12 * hd;
  for (train::Parameter& prm : model.parameters()) {
    if (!prm.name.ends_with("w_qkv") && !prm.name.ends_with("b_qkv")) continue;
    const std::int64_t rows = prm.value.rank() == 2 ? prm.value.shape()[0] : 1;
    float* v = prm.value.data<float>();
    for (std::int64_t r = 0; r < rows; ++r)
      for (const std::int64_t part : {4, 8})  // K heads start at column 4 hd, V at 8 hd
        for (const std::int64_t g : {0, 2})
          for (std::int64_t d = 0; d < hd; ++d)
            v[r * W + (part + g + 1) * hd + d] = v[r * W + (part + g) * hd + d];
  }
  train::Model gqa = convert_kv_heads(model, 2);
  const Batch b = task->validation_batch(0, 8);
  const std::vector<float> x = logits_of(model, b), y = logits_of(gqa, b);
  // The pooled weights equal the originals exactly (a double mean of equal floats); what can
  // differ is the QKV GEMM's blocking for 96 vs 64 output columns, i.e. the order of the 32
  // products of each K/V entry: |dk| <= 2 * 32 * u * sum|x w| ~ 4e-6 relative (u = 2^-24).
  // Through scores, softmax, W_O, two layers and the head the relative change is amplified by
  // at most a few tens (|logits| ~ 1 here), so 1e-4 (1 + |logit|) bounds it.
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], 1e-4 * (1 + std::fabs(x[i])));
}

}  // namespace
}  // namespace headcount::testing
