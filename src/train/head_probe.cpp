// probe_heads: validation batches -> Model::forward(keep_probs) -> per layer P [B, H, T, T] ->
// accumulate_head_probe, which walks the scored query positions and sums (in double) each
// head's entropy and its attention mass on each relation's positions; the means at the end.
#include "headcount/train/head_probe.h"

#include <cmath>

#include "headcount/error.h"
#include "nlohmann/json.hpp"

namespace headcount::train {

Relation offset_relation(std::int64_t a) {
  return {.name = detail::concat("offset ", a),
          .positions = [a](const Batch&, std::int64_t, std::int64_t t) {
            return t >= a ? std::vector<std::int64_t>{t - a} : std::vector<std::int64_t>{};
          }};
}

Relation previous_occurrence_relation(std::int64_t shift) {
  return {.name = shift == 0 ? std::string("previous occurrence")
                             : detail::concat("previous occurrence + ", shift),
          .positions = [shift](const Batch& b, std::int64_t row, std::int64_t t) {
            const std::int32_t* x = b.tokens.data() + row * b.seq_len;
            for (std::int64_t j = t - 1; j >= 0; --j)
              if (x[j] == x[t])
                return j + shift <= t ? std::vector<std::int64_t>{j + shift}
                                      : std::vector<std::int64_t>{};
            return std::vector<std::int64_t>{};
          }};
}

Relation target_token_relation() {
  return {.name = "target token",
          .positions = [](const Batch& b, std::int64_t row, std::int64_t t) {
            const std::int32_t* x = b.tokens.data() + row * b.seq_len;
            const std::int32_t y = b.targets[static_cast<std::size_t>(row * b.seq_len + t)];
            std::vector<std::int64_t> out;
            for (std::int64_t s = 0; s <= t; ++s)
              if (x[s] == y) out.push_back(s);
            return out;
          }};
}

Relation other_token_relation() {
  return {.name = "other token", .positions = [](const Batch& b, std::int64_t row, std::int64_t t) {
            const std::int32_t* x = b.tokens.data() + row * b.seq_len;
            const std::int32_t y = b.targets[static_cast<std::size_t>(row * b.seq_len + t)];
            std::vector<std::int64_t> out;
            for (std::int64_t s = 0; s < t; ++s)
              if (x[s] != y && x[s] != x[t]) out.push_back(s);
            return out;
          }};
}

void accumulate_head_probe(const Tensor& probs, const Batch& batch,
                           const std::vector<Relation>& relations, std::vector<double>& sums,
                           std::vector<std::int64_t>& counts, std::int64_t& queries) {
  check(probs.rank() == 4 && probs.shape()[0] == batch.batch && probs.shape()[2] == batch.seq_len &&
            probs.shape()[3] == batch.seq_len,
        "probs",
        detail::concat("[", batch.batch, ", heads, ", batch.seq_len, ", ", batch.seq_len, "]"),
        probs.rank());
  const std::int64_t H = probs.shape()[1], T = batch.seq_len,
                     R = static_cast<std::int64_t>(relations.size());
  const std::size_t per_head = static_cast<std::size_t>(1 + R);
  if (sums.empty()) {
    sums.assign(static_cast<std::size_t>(H) * per_head, 0.0);
    counts.assign(static_cast<std::size_t>(H) * per_head, 0);
  }
  check(sums.size() == static_cast<std::size_t>(H) * per_head, "sums",
        "one slot per head and relation", sums.size());
  const float* P = probs.data<float>();
  for (std::int64_t b = 0; b < batch.batch; ++b)
    for (std::int64_t t = 0; t < T; ++t) {
      if (batch.targets[static_cast<std::size_t>(b * T + t)] == Batch::kIgnore) continue;
      ++queries;
      std::vector<std::vector<std::int64_t>> where;
      for (const Relation& r : relations) where.push_back(r.positions(batch, b, t));
      for (std::int64_t h = 0; h < H; ++h) {
        const float* row = P + ((b * H + h) * T + t) * T;
        double entropy = 0;
        for (std::int64_t s = 0; s < T; ++s)
          if (row[s] > 0)
            entropy -= static_cast<double>(row[s]) * std::log(static_cast<double>(row[s]));
        const std::size_t base = static_cast<std::size_t>(h) * per_head;
        sums[base] += entropy;
        ++counts[base];
        for (std::int64_t i = 0; i < R; ++i) {
          if (where[static_cast<std::size_t>(i)].empty()) continue;
          double mass = 0;
          for (const std::int64_t s : where[static_cast<std::size_t>(i)]) mass += row[s];
          sums[base + 1 + static_cast<std::size_t>(i)] += mass;
          ++counts[base + 1 + static_cast<std::size_t>(i)];
        }
      }
    }
}

HeadProbeResult probe_heads(Context& ctx, Model& model, const Task& task,
                            const std::vector<Relation>& relations, std::int64_t batch,
                            std::int64_t max_batches) {
  const ModelConfig& c = model.config();
  std::int64_t n = task.validation_batches(batch);
  if (max_batches > 0 && max_batches < n) n = max_batches;
  std::vector<std::vector<double>> sums(static_cast<std::size_t>(c.layers));
  std::vector<std::vector<std::int64_t>> counts(static_cast<std::size_t>(c.layers));
  HeadProbeResult result;
  for (const Relation& r : relations) result.relations.push_back(r.name);
  for (std::int64_t i = 0; i < n; ++i) {
    const Batch b = task.validation_batch(i, batch);
    model.forward(ctx, b, nullptr, {.kernel = Kernel::reference, .keep_probs = true});
    for (std::int64_t l = 0; l < c.layers; ++l) {
      std::int64_t q = 0;
      accumulate_head_probe(model.probs(l), b, relations, sums[static_cast<std::size_t>(l)],
                            counts[static_cast<std::size_t>(l)], q);
      if (l == 0) result.queries += q;
    }
  }
  const std::size_t per_head = 1 + relations.size();
  for (std::int64_t l = 0; l < c.layers; ++l)
    for (std::int64_t h = 0; h < c.heads_in(l); ++h) {
      HeadLook look{.layer = l, .head = h};
      const auto& s = sums[static_cast<std::size_t>(l)];
      const auto& k = counts[static_cast<std::size_t>(l)];
      const std::size_t base = static_cast<std::size_t>(h) * per_head;
      if (s.empty()) continue;
      look.entropy = k[base] > 0 ? s[base] / static_cast<double>(k[base]) : 0.0;
      for (std::size_t i = 0; i < relations.size(); ++i) {
        const std::int64_t m = k[base + 1 + i];
        look.fractions.push_back(m > 0 ? s[base + 1 + i] / static_cast<double>(m) : 0.0);
        look.counted.push_back(m);
      }
      result.heads.push_back(std::move(look));
    }
  return result;
}

nlohmann::json to_json(const HeadProbeResult& result) {
  nlohmann::json heads = nlohmann::json::array();
  for (const HeadLook& h : result.heads)
    heads.push_back({{"layer", h.layer},
                     {"head", h.head},
                     {"entropy", h.entropy},
                     {"fractions", h.fractions},
                     {"counted", h.counted}});
  return {{"relations", result.relations}, {"heads", heads}, {"queries", result.queries}};
}

}  // namespace headcount::train
