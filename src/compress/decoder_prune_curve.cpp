// decoder_prune_curve (sweeps.h): the pruning curve of a grouped-query decoder, by whole K/V
// groups. Every model scored is physically pruned (model::remove_heads) and built in memory:
// what is measured is what a user of the pruned model would run, not a mask.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>
#include <random>

#include "compress/sweeps.h"
#include "headcount/decoder_training.h"
#include "headcount/error.h"
#include "headcount/sts.h"

namespace headcount::compress {

using detail::concat;
using nlohmann::json;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Unit u is K/V group u % groups of layer u / groups (the model's groups before pruning).
struct Units {
  std::int64_t layers = 0, groups = 0, group_size = 0;
  std::int64_t total() const { return layers * groups; }
  std::int64_t layer(std::size_t u) const { return static_cast<std::int64_t>(u) / groups; }
  std::int64_t group(std::size_t u) const { return static_cast<std::int64_t>(u) % groups; }
  std::int64_t removable() const { return layers * (groups - 1); }  // one group stays per layer
};

// The first `count` units of `order` that leave every layer a group (a unit that would empty
// its layer is passed over for the next).
std::vector<std::size_t> take_removable(const Units& units, const std::vector<std::size_t>& order,
                                        std::int64_t count) {
  std::vector<std::int64_t> left(static_cast<std::size_t>(units.layers), units.groups);
  std::vector<std::size_t> out;
  for (std::size_t u : order) {
    if (static_cast<std::int64_t>(out.size()) == count) break;
    std::int64_t& in_layer = left[static_cast<std::size_t>(units.layer(u))];
    if (in_layer == 1) continue;
    --in_layer;
    out.push_back(u);
  }
  HEADCOUNT_CHECK(static_cast<std::int64_t>(out.size()) == count, "groups to remove",
                  concat("at most ", units.removable(), " (one group stays in each layer)"), count);
  return out;
}

// The positions (query heads, in the model as loaded) of the removed groups, per layer.
std::vector<std::vector<std::int64_t>> head_positions(const Units& units,
                                                      const std::vector<std::size_t>& removed) {
  std::vector<std::vector<std::int64_t>> positions(static_cast<std::size_t>(units.layers));
  for (std::size_t u : removed)
    for (std::int64_t i = 0; i < units.group_size; ++i)
      positions[static_cast<std::size_t>(units.layer(u))].push_back(
          units.group(u) * units.group_size + i);
  return positions;
}

// Multiply-adds of one token through the layers (projections, FFN, and attention over
// `attended` positions: scores and the weighted sum).
double layer_macs_per_token(const model::Config& c, double attended) {
  double macs = 0;
  const double d = static_cast<double>(c.d_model), hd = static_cast<double>(c.head_dim);
  for (std::int64_t l = 0; l < c.layer_count(); ++l) {
    const double h = static_cast<double>(c.heads_in(l)), kv = static_cast<double>(c.kv_heads_in(l));
    macs += d * h * hd + 2 * d * kv * hd + h * hd * d;  // Q, K, V, O
    macs += (c.activation == model::Activation::swiglu ? 3 : 2) * d * static_cast<double>(c.d_ff);
    macs += 2 * h * hd * attended;
  }
  return macs;
}

double head_macs(const model::Config& c) {
  return static_cast<double>(c.vocab) * static_cast<double>(c.d_model);
}

std::int64_t cache_bytes_per_token(const model::Config& c) {
  std::int64_t bytes = 0;
  for (std::int64_t l = 0; l < c.layer_count(); ++l)
    bytes += cache_token_bytes(CacheDType::f32, c.kv_heads_in(l), c.head_dim, c.head_dim);
  return bytes;
}

json order_json(const Units& units, const std::vector<std::size_t>& order) {
  json out = json::array();
  for (std::size_t u : order) out.push_back({{"layer", units.layer(u)}, {"group", units.group(u)}});
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

json decoder_prune_curve(Context& ctx, const model::Weights& weights, const BpeTokenizer& tokenizer,
                         std::span<const std::int32_t> dev, std::span<const std::int32_t> test,
                         const DecoderPruneCurveOptions& o) {
  const model::Config& c = weights.config;
  HEADCOUNT_CHECK(c.family == model::Family::llama, "model", "a Llama-family decoder",
                  model::family_name(c.family));
  HEADCOUNT_CHECK(c.uniform() && c.kv_heads_in(0) >= 2, "model",
                  "the same heads in every layer and at least 2 K/V groups per layer",
                  concat(c.layer_count(), " layers, layer 0 with ", c.kv_heads_in(0), " K/V heads",
                         c.uniform() ? "" : ", per-layer shapes"));
  HEADCOUNT_CHECK(o.random_orders >= 0 && o.random_orders <= 100, "random orders", "in [0, 100]",
                  o.random_orders);
  HEADCOUNT_CHECK(static_cast<std::int64_t>(dev.size()) >= o.context &&
                      static_cast<std::int64_t>(test.size()) >= o.context,
                  "dev and test texts",
                  concat("at least one window of ", o.context, " tokens each"),
                  concat(dev.size(), " and ", test.size(), " tokens"));
  if (!o.speed_fractions.empty())
    HEADCOUNT_CHECK(o.speed_prompt >= 1 && o.speed_decoded >= 1 && o.speed_rounds >= 1 &&
                        o.speed_prompt + o.speed_decoded <= c.context &&
                        static_cast<std::int64_t>(test.size()) >= o.speed_prompt,
                    "speed prompt",
                    concat("1 to ", c.context, " positions with the decoded tokens, within the ",
                           test.size(), " test tokens"),
                    concat(o.speed_prompt, " + ", o.speed_decoded));
  const Units units{.layers = c.layer_count(),
                    .groups = c.kv_heads_in(0),
                    .group_size = c.heads_in(0) / c.kv_heads_in(0)};
  for (double f : o.speed_fractions)
    HEADCOUNT_CHECK(
        f >= 0 && std::llround(f * static_cast<double>(units.total())) <= units.removable(),
        "speed fractions",
        concat("in [0, ",
               static_cast<double>(units.removable()) / static_cast<double>(units.total()),
               "] (one group stays in each layer)"),
        f);
  auto log = [&](const std::string& line) {
    if (o.log) o.log(line);
  };
  auto decoder_of = [&](const model::Weights& w) {
    return LlamaDecoder(w, BpeTokenizer(tokenizer.vocabulary()), {.weights = o.weights});
  };
  auto pruned = [&](const std::vector<std::size_t>& removed) {
    return model::remove_heads(weights, head_positions(units, removed));
  };

  json r = {{"command", "prune-curve"},
            {"unit", "K/V group (its query heads and its K/V head)"},
            {"layers", units.layers},
            {"groups_per_layer", units.groups},
            {"query_heads_per_group", units.group_size},
            {"total_groups", units.total()},
            {"dev_tokens", dev.size()},
            {"test_tokens", test.size()},
            {"context", o.context},
            {"weights", dtype_name(o.weights)},
            {"threads", ctx.threads()},
            {"seed", o.seed},
            {"reference",
             "Michel, Levy, Neubig 2019 (Are Sixteen Heads Really Better than One?); Voita et al. "
             "2019 (Analyzing Multi-Head Self-Attention)"}};

  // 1. The ranking on dev: each group removed alone (or the rises an earlier run measured).
  auto start = Clock::now();
  const PerplexityResult dev_base = decoder_of(weights).perplexity(ctx, dev, o.context);
  r["dev_baseline"] = {{"nll", dev_base.nll},
                       {"perplexity", dev_base.perplexity},
                       {"scored_tokens", dev_base.scored}};
  if (o.ablation)
    HEADCOUNT_CHECK(static_cast<std::int64_t>(o.ablation->size()) == units.total(),
                    "the ablation ranking", concat(units.total(), " groups"), o.ablation->size());
  std::vector<double> rise(static_cast<std::size_t>(units.total()));
  json ablation = json::array();
  for (std::size_t u = 0; u < rise.size(); ++u) {
    if (o.ablation) {
      rise[u] = (*o.ablation)[u];
    } else {
      rise[u] = decoder_of(pruned({u})).perplexity(ctx, dev, o.context).nll - dev_base.nll;
      if ((u + 1) % static_cast<std::size_t>(units.groups) == 0)
        log(concat("ablation: layer ", units.layer(u), " done (",
                   std::llround(seconds_since(start)), " s)"));
    }
    ablation.push_back({{"layer", units.layer(u)},
                        {"group", units.group(u)},
                        {"dev_nll", dev_base.nll + rise[u]},
                        {"nll_rise", rise[u]}});
  }
  r["ablation_from"] = o.ablation_from.empty() ? json(nullptr) : json(o.ablation_from);
  std::vector<std::size_t> ablation_order(rise.size());
  std::iota(ablation_order.begin(), ablation_order.end(), 0);
  std::stable_sort(ablation_order.begin(), ablation_order.end(),
                   [&](std::size_t a, std::size_t b) { return rise[a] < rise[b]; });
  r["ablation"] = ablation;
  r["ablation_order"] = order_json(units, ablation_order);
  r["ablation_seconds"] = seconds_since(start);

  // 1b. The gradient ranking on the same dev text: a group's importance is the sum of its query
  //     heads' (Michel et al.'s |dL/dξ_h|, each layer normalised), least important first.
  std::optional<std::vector<std::size_t>> gradient_order;
  if (o.gradient) {
    start = Clock::now();
    const DecoderGradientImportance g = decoder_gradient_importance(ctx, weights, dev, o.context);
    std::vector<double> importance(static_cast<std::size_t>(units.total()), 0.0);
    json groups = json::array();
    for (std::size_t u = 0; u < importance.size(); ++u) {
      for (std::int64_t i = 0; i < units.group_size; ++i)
        importance[u] +=
            g.importance[static_cast<std::size_t>(units.layer(u))]
                        [static_cast<std::size_t>(units.group(u) * units.group_size + i)];
      groups.push_back(
          {{"layer", units.layer(u)}, {"group", units.group(u)}, {"importance", importance[u]}});
    }
    std::vector<std::size_t> order(importance.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return importance[a] < importance[b]; });
    r["gradient"] = {{"windows", g.windows},
                     {"scored_tokens", g.scored_tokens},
                     {"mean_loss", g.mean_loss},
                     {"groups", groups},
                     // How far the two rankings agree: Spearman's rank correlation (sts.h) of the
                     // groups' gradient importances and their ablation rises.
                     {"spearman_vs_ablation", spearman(importance, rise)},
                     {"seconds", seconds_since(start)}};
    r["gradient_order"] = order_json(units, order);
    gradient_order = order;
    log(concat("gradient ranking: ", g.windows, " dev windows (",
               std::llround(seconds_since(start)), " s); Spearman against the ablation rises ",
               r["gradient"]["spearman_vs_ablation"].get<double>()));
  }

  std::vector<std::vector<std::size_t>> random_orders;
  for (std::int64_t s = 0; s < o.random_orders; ++s) {
    std::vector<std::size_t> order(static_cast<std::size_t>(units.total()));
    std::iota(order.begin(), order.end(), 0);
    std::mt19937_64 rng(static_cast<std::uint64_t>(o.seed + s));
    std::shuffle(order.begin(), order.end(), rng);
    random_orders.push_back(order);
  }

  // 2. The curve on test: every point a physically pruned model.
  start = Clock::now();
  std::vector<std::int64_t> counts;
  for (std::int64_t k : curve_counts(units.total()))
    if (k <= units.removable()) counts.push_back(k);
  const double attended = static_cast<double>(o.context) / 2;  // a window's mean causal length
  const bool in_context = o.in_context.sequences > 0;
  // One pruned model's test NLL (and perplexity) and, if asked, its in-context losses.
  auto score = [&](const model::Weights& w) {
    const LlamaDecoder decoder = decoder_of(w);
    const PerplexityResult p = decoder.perplexity(ctx, test, o.context);
    json out = {{"nll", p.nll}, {"perplexity", p.perplexity}, {"scored_tokens", p.scored}};
    if (in_context) {
      const InContextLoss l = decoder_in_context_loss(ctx, decoder, o.in_context);
      out["in_context"] = {
          {"first_copy", l.first_copy}, {"second_copy", l.second_copy}, {"drop", l.drop()}};
    }
    return out;
  };
  if (in_context)
    r["in_context"] = {{"sequences", o.in_context.sequences},
                       {"length", o.in_context.length},
                       {"seed", o.in_context.seed}};
  json points = json::array();
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const std::int64_t k = counts[i];
    const model::Weights by_ablation = pruned(take_removable(units, ablation_order, k));
    const json a = score(by_ablation);
    json point = {{"fraction", static_cast<double>(i) / 10.0},
                  {"groups_removed", k},
                  {"query_heads_removed", k * units.group_size},
                  {"kv_heads_removed", k},
                  {"macs_per_token", layer_macs_per_token(by_ablation.config, attended) +
                                         head_macs(by_ablation.config)},
                  {"kv_cache_bytes_per_token", cache_bytes_per_token(by_ablation.config)},
                  {"ablation", a}};
    if (gradient_order)
      point["gradient"] = k == 0 ? a : score(pruned(take_removable(units, *gradient_order, k)));
    std::vector<double> nll, drop;
    json random = json::array();
    for (const auto& order : random_orders) {
      const json q = k == 0 ? a : score(pruned(take_removable(units, order, k)));
      nll.push_back(q["nll"].get<double>());
      if (in_context) drop.push_back(q["in_context"]["drop"].get<double>());
      random.push_back(q);
    }
    auto mean_std = [](const std::vector<double>& v) {
      double mean = 0, var = 0;
      for (double x : v) mean += x / static_cast<double>(v.size());
      for (double x : v)
        var += (x - mean) * (x - mean) / static_cast<double>(v.size() > 1 ? v.size() - 1 : 1);
      return std::pair{mean, std::sqrt(var)};  // sample std (n - 1)
    };
    if (!nll.empty()) {
      const auto [mean, sd] = mean_std(nll);
      point["random"] = random;
      point["random_mean_nll"] = mean;
      point["random_std_nll"] = sd;
      point["random_best_nll"] = *std::min_element(nll.begin(), nll.end());
      if (in_context) {
        const auto [drop_mean, drop_sd] = mean_std(drop);
        point["random_mean_in_context_drop"] = drop_mean;
        point["random_std_in_context_drop"] = drop_sd;
      }
    }
    points.push_back(point);
    log(concat(
        k, " groups removed: test perplexity ", a["perplexity"].get<double>(), " (ablation order)",
        gradient_order ? concat(", ", point["gradient"]["perplexity"].get<double>(), " (gradient)")
                       : "",
        nll.empty() ? ""
                    : concat(", random mean NLL ", point["random_mean_nll"].get<double>(), " vs ",
                             a["nll"].get<double>()),
        in_context ? concat("; in-context loss drop ", a["in_context"]["drop"].get<double>()) : "",
        " (", std::llround(seconds_since(start)), " s)"));
  }
  r["points"] = points;
  r["test_seconds"] = seconds_since(start);

  // 3. Speed of the ablation order's models, in interleaved rounds.
  if (!o.speed_fractions.empty()) {
    start = Clock::now();
    struct Timed {
      std::int64_t groups_removed;
      model::Config config;
      LlamaDecoder decoder;
      std::vector<double> prefill, decode;
    };
    std::vector<Timed> models;
    for (double f : o.speed_fractions) {
      const std::int64_t k = std::llround(f * static_cast<double>(units.total()));
      const model::Weights w = pruned(take_removable(units, ablation_order, k));
      models.push_back({k, w.config, decoder_of(w), {}, {}});
    }
    const std::span<const std::int32_t> prompt =
        test.first(static_cast<std::size_t>(o.speed_prompt));
    for (int round = 0; round <= o.speed_rounds; ++round) {  // round 0 warms up
      for (Timed& m : models) {
        KvCache cache = m.decoder.make_cache(o.speed_prompt + o.speed_decoded);
        auto greedy = [&](const Tensor& logits) {
          return sample_token({logits.data<const float>(), static_cast<std::size_t>(c.vocab)}, 0, 1,
                              0);
        };
        const auto t0 = Clock::now();
        std::int32_t token = greedy(m.decoder.executor().forward(ctx, prompt, cache));
        const auto t1 = Clock::now();
        for (std::int64_t s = 0; s < o.speed_decoded; ++s)
          token = greedy(
              m.decoder.executor().forward(ctx, std::span<const std::int32_t>(&token, 1), cache));
        const auto t2 = Clock::now();
        if (round == 0) continue;
        m.prefill.push_back(static_cast<double>(o.speed_prompt) /
                            std::chrono::duration<double>(t1 - t0).count());
        m.decode.push_back(static_cast<double>(o.speed_decoded) /
                           std::chrono::duration<double>(t2 - t1).count());
      }
    }
    const double n = static_cast<double>(o.speed_prompt);
    // Prefill: every prompt token through the layers (attending to (n + 1) / 2 positions on
    // average) and one row of logits; decode: the layers at the mean cache length, and the head.
    auto prefill_macs = [&](const model::Config& m) {
      return n * layer_macs_per_token(m, (n + 1) / 2) + head_macs(m);
    };
    auto decode_macs = [&](const model::Config& m) {
      return layer_macs_per_token(m, n + (static_cast<double>(o.speed_decoded) + 1) / 2) +
             head_macs(m);
    };
    json speed = json::array();
    const Timed& base = models.front();
    for (const Timed& m : models) {
      speed.push_back(
          {{"groups_removed", m.groups_removed},
           {"fraction", static_cast<double>(m.groups_removed) / static_cast<double>(units.total())},
           {"prompt_tokens", o.speed_prompt},
           {"decoded_tokens", o.speed_decoded},
           {"prefill_tokens_per_second", median(m.prefill)},
           {"decode_tokens_per_second", median(m.decode)},
           {"prefill_runs", m.prefill},
           {"decode_runs", m.decode},
           {"prefill_speedup", median(m.prefill) / median(base.prefill)},
           {"decode_speedup", median(m.decode) / median(base.decode)},
           {"prefill_macs", prefill_macs(m.config)},
           {"decode_macs_per_token", decode_macs(m.config)},
           {"prefill_mac_ratio", prefill_macs(base.config) / prefill_macs(m.config)},
           {"decode_mac_ratio", decode_macs(base.config) / decode_macs(m.config)},
           {"kv_cache_bytes_per_token", cache_bytes_per_token(m.config)}});
    }
    r["speed"] = speed;
    r["speed_seconds"] = seconds_since(start);
    log(concat("speed of ", models.size(), " pruned models (", std::llround(seconds_since(start)),
               " s)"));
  }
  return r;
}

}  // namespace headcount::compress
