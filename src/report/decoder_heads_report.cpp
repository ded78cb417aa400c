// The decoder's heads page: summary, role grid (30 x 9 for SmolLM2) with the rule, heatmaps of
// a few heads on one repeated random sequence, and the table of every head's scores.
#include "report/decoder_heads_report.h"

#include <algorithm>
#include <map>

#include "headcount/error.h"
#include "report/heads_report.h"
#include "report/html.h"

namespace headcount::report {

using detail::concat;

namespace {

const char* role_colour(DecoderHeadRole role) {
  switch (role) {
    case DecoderHeadRole::induction:
      return "#e377c2";
    case DecoderHeadRole::previous_token:
      return "#1f77b4";
    case DecoderHeadRole::sink:
      return "#d62728";
    case DecoderHeadRole::self:
      return "#8c564b";
    case DecoderHeadRole::broad:
      return "#bcbd22";
    case DecoderHeadRole::mixed:
      return "#d9d9d9";
  }
  return "#d9d9d9";
}

const char* role_short(DecoderHeadRole role) {
  switch (role) {
    case DecoderHeadRole::induction:
      return "ind";
    case DecoderHeadRole::previous_token:
      return "prev";
    case DecoderHeadRole::sink:
      return "sink";
    case DecoderHeadRole::self:
      return "self";
    case DecoderHeadRole::broad:
      return "broad";
    case DecoderHeadRole::mixed:
      return "mixed";
  }
  return "";
}

std::string head_label(std::int64_t layer, std::int64_t head) {
  return concat("L", layer, " H", head);
}

std::string role_grid(const DecoderHeadAnalysis& a) {
  constexpr int cell = kHeadsGridCell;
  return heads_grid_svg(
      "role-grid", a.layers, a.heads, [&](std::int64_t l, std::int64_t h, int x, int y) {
        const DecoderHeadScores& s = a.per_head[static_cast<std::size_t>(l * a.heads + h)];
        const bool dark_text = s.role == DecoderHeadRole::mixed || s.role == DecoderHeadRole::broad;
        const char* light = dark_text ? "" : " light";
        return concat("<g><title>", head_label(l, h), ": ", decoder_role_name(s.role),
                      " (prefix-matching ", fixed(s.induction.prefix_matching, 3), ", copying ",
                      fixed(s.induction.copying, 2), ", prev ", fixed(s.corpus.previous, 2),
                      ", sink ", fixed(s.corpus.first, 2), ")</title><rect class=\"cell\" x=\"", x,
                      "\" y=\"", y, "\" width=\"", cell - 2, "\" height=\"", cell - 2, "\" fill=\"",
                      role_colour(s.role), "\"/><text x=\"", x + cell / 2 - 1, "\" y=\"", y + 18,
                      "\" class=\"cell-text", light, "\">", role_short(s.role), "</text><text x=\"",
                      x + cell / 2 - 1, "\" y=\"", y + 33, "\" class=\"cell-small", light, "\">pm ",
                      fixed(s.induction.prefix_matching, 2), "</text><text x=\"", x + cell / 2 - 1,
                      "\" y=\"", y + 45, "\" class=\"cell-small", light, "\">cp ",
                      fixed(s.induction.copying, 1), "</text></g>\n");
      });
}

}  // namespace

std::vector<std::pair<std::int64_t, std::int64_t>> decoder_heatmap_heads(
    const DecoderHeadAnalysis& a, std::size_t induction) {
  std::vector<std::size_t> order(a.per_head.size());
  for (std::size_t k = 0; k < order.size(); ++k) order[k] = k;
  auto by = [&](auto score) {
    std::vector<std::size_t> o = order;
    std::stable_sort(o.begin(), o.end(), [&](std::size_t x, std::size_t y) {
      return score(a.per_head[x]) > score(a.per_head[y]);
    });
    return o;
  };
  std::vector<std::size_t> chosen;
  auto add = [&](std::size_t k) {
    if (std::find(chosen.begin(), chosen.end(), k) == chosen.end()) chosen.push_back(k);
  };
  std::size_t taken = 0;
  for (std::size_t k : by([](const DecoderHeadScores& s) { return s.induction.prefix_matching; }))
    if (taken < induction && a.per_head[k].role == DecoderHeadRole::induction) {
      add(k);
      ++taken;
    }
  if (!order.empty()) {
    add(by([](const DecoderHeadScores& s) { return s.corpus.previous; }).front());
    add(by([](const DecoderHeadScores& s) { return s.corpus.first; }).front());
    // Without induction heads, the best prefix-matching head still shows what was looked for.
    if (taken == 0)
      add(by([](const DecoderHeadScores& s) { return s.induction.prefix_matching; }).front());
  }
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  for (std::size_t k : chosen) out.emplace_back(a.per_head[k].layer, a.per_head[k].head);
  return out;
}

std::string render_decoder_heads_html(const DecoderHeadsReport& r) {
  const DecoderHeadAnalysis& a = r.analysis;
  const InductionResult& ind = a.induction;
  std::map<DecoderHeadRole, int> counts;
  for (const DecoderHeadScores& s : a.per_head) ++counts[s.role];

  std::string s =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>headcount: what "
      "the decoder's heads do</title>\n<style>";
  s += heads_page_style();
  s += "</style></head><body>\n";
  s += concat("<h1>What the ", a.layers * a.heads, " heads of ", escape(r.model), " do</h1>\n");
  s += concat("<p>", a.layers, " layers of ", a.heads, " query heads over ", a.kv_heads,
              " K/V heads. Corpus: ", a.corpus.windows, " windows of ", a.corpus.context,
              " tokens (", a.corpus.windows * (a.corpus.context - 1), " query rows) from ");
  for (std::size_t i = 0; i < r.corpus.size(); ++i)
    s += concat(i ? ", " : "", "<code>", escape(r.corpus[i]), "</code>");
  s += concat(
      " (", r.corpus_tokens,
      " tokens), statistics by the streaming kernel's second pass. Induction: ", ind.sequences,
      " sequences of ", ind.bos ? "BOS, " : "", ind.length, " random tokens (seed ", ind.seed,
      ") repeated once, probabilities from the reference kernel on the q, k the streaming "
      "kernel used. In-context loss: ",
      fixed(ind.loss_first_copy, 3), " nats on the first copy, ", fixed(ind.loss_second_copy, 3),
      " on the second: a drop of <b>", fixed(ind.loss_drop(), 3), " nats</b>. ",
      fixed(r.total_seconds, 1), " s on ", r.threads, " threads (OV circuit ",
      fixed(r.circuit_seconds, 1), " s, corpus ", fixed(a.corpus_seconds, 1), " s, induction ",
      fixed(a.induction_seconds, 1),
      " s). Measures after Olsson et al. 2022, <i>In-context Learning and Induction "
      "Heads</i>.</p>\n");

  s += "<h2>Roles</h2>\n<div class=\"flex\"><div>" + role_grid(a) + "</div><ul class=\"legend\">\n";
  for (DecoderHeadRole role : kAllDecoderHeadRoles)
    s += concat("<li><span class=\"swatch\" style=\"background:", role_colour(role),
                "\"></span><b>", decoder_role_name(role), "</b>: ", counts[role], " heads &mdash; ",
                escape(decoder_role_rule(role)), "</li>\n");
  s += "</ul></div>\n<p>Rules applied in order, fixed before the first run on a model "
       "(docs/decoder-heads.md). Each cell: the role, the prefix-matching score (pm) and the "
       "copying score (cp, the z-score of the attended token's logit in the head's direct "
       "OV logits).</p>\n";

  s += concat("<h2>Heads on a repeated random sequence</h2>\n<p>The first induction sequence (",
              r.maps.n, " tokens; the second copy starts at row ", r.maps.n - ind.length,
              "). Row: the query token; column: the key; colour &prop; &radic;p. An induction "
              "head draws a stripe one token right of the diagonal offset by the copy length; a "
              "previous-token head, the sub-diagonal; a sink, the first column.</p>\n<div "
              "class=\"layer\">\n");
  for (const auto& [l, h] : r.heatmap_heads) {
    const DecoderHeadScores& st = a.per_head[static_cast<std::size_t>(l * a.heads + h)];
    s += concat("<figure>", attention_heatmap_svg(r.maps, l, h), "<figcaption>", head_label(l, h),
                " &middot; ", decoder_role_name(st.role), " &middot; pm ",
                fixed(st.induction.prefix_matching, 2), "</figcaption></figure>\n");
  }
  s += "</div>\n";

  s += "<h2>Every head</h2>\n<table id=\"stats\"><tr><th>layer</th><th>head</th><th>K/V "
       "head</th><th>role</th><th>prefix-matching</th><th>copying</th><th>prev</th><th>self</"
       "th><th>sink (pos 0)</th><th>entropy</th><th>ratio</th><th>distance</th></tr>\n";
  for (const DecoderHeadScores& st : a.per_head)
    s += concat("<tr><td>", st.layer, "</td><td>", st.head, "</td><td>",
                st.head / (a.heads / a.kv_heads), "</td><td class=\"l\">",
                decoder_role_name(st.role), "</td><td>", fixed(st.induction.prefix_matching, 3),
                "</td><td>", fixed(st.induction.copying, 2), "</td><td>",
                fixed(st.corpus.previous, 3), "</td><td>", fixed(st.corpus.self, 3), "</td><td>",
                fixed(st.corpus.first, 3), "</td><td>", fixed(st.corpus.entropy, 3), "</td><td>",
                fixed(st.corpus.normalized_entropy(), 3), "</td><td>", fixed(st.corpus.distance, 1),
                "</td></tr>\n");
  s +=
      "</table>\n<p>prefix-matching and copying on the repeated random sequences; prev, self, "
      "sink: mean attention to i&minus;1, i and position 0 over the corpus; entropy in nats, ratio "
      "= entropy / ln(i+1); distance: mean i &minus; j in tokens. Generated by <code>headcount "
      "heads --model FILE.gguf</code>.</p>\n";
  s += "<p><output id=\"render-check\"></output></p>\n";
  s += heads_render_check_script();
  s += "</body></html>\n";
  return s;
}

nlohmann::json decoder_heads_json(const DecoderHeadsReport& r) {
  using nlohmann::json;
  const DecoderHeadAnalysis& a = r.analysis;
  const InductionResult& ind = a.induction;
  json out;
  out["model"] = r.model;
  out["layers"] = a.layers;
  out["heads_per_layer"] = a.heads;
  out["kv_heads_per_layer"] = a.kv_heads;
  out["corpus"] = {{"files", r.corpus},
                   {"tokens", r.corpus_tokens},
                   {"context", a.corpus.context},
                   {"windows", a.corpus.windows},
                   {"rows_per_head", a.corpus.windows * (a.corpus.context - 1)}};
  out["induction"] = {{"sequences", ind.sequences},
                      {"length", ind.length},
                      {"seed", ind.seed},
                      {"bos", ind.bos},
                      {"loss_first_copy", ind.loss_first_copy},
                      {"loss_second_copy", ind.loss_second_copy},
                      {"loss_drop", ind.loss_drop()}};
  out["rule"] = {{"induction_prefix_matching_at_least", kInductionPrefixMatching},
                 {"induction_copying_above", kInductionCopying},
                 {"share_at_least", kDecoderRoleShare},
                 {"broad_entropy_ratio_at_least", kDecoderRoleBroadEntropy}};
  json roles = json::object();
  for (DecoderHeadRole role : kAllDecoderHeadRoles) roles[decoder_role_name(role)] = 0;
  json induction_heads = json::array();
  for (const DecoderHeadScores& st : a.per_head) {
    roles[decoder_role_name(st.role)] = roles[decoder_role_name(st.role)].get<int>() + 1;
    if (st.role == DecoderHeadRole::induction)
      induction_heads.push_back({{"layer", st.layer},
                                 {"head", st.head},
                                 {"prefix_matching", st.induction.prefix_matching},
                                 {"copying", st.induction.copying}});
  }
  out["role_counts"] = roles;
  out["induction_heads"] = induction_heads;
  json heatmaps = json::array();
  for (const auto& [l, h] : r.heatmap_heads) heatmaps.push_back({{"layer", l}, {"head", h}});
  out["heatmap_heads"] = heatmaps;
  json heads = json::array();
  for (const DecoderHeadScores& st : a.per_head)
    heads.push_back({{"layer", st.layer},
                     {"head", st.head},
                     {"kv_head", st.head / (a.heads / a.kv_heads)},
                     {"role", decoder_role_name(st.role)},
                     {"prefix_matching", st.induction.prefix_matching},
                     {"copying", st.induction.copying},
                     {"previous", st.corpus.previous},
                     {"self", st.corpus.self},
                     {"first", st.corpus.first},
                     {"entropy", st.corpus.entropy},
                     {"uniform_entropy", st.corpus.uniform_entropy},
                     {"normalized_entropy", st.corpus.normalized_entropy()},
                     {"distance", st.corpus.distance},
                     {"mass", st.corpus.mass},
                     {"rows", st.corpus.rows}});
  out["heads"] = heads;
  out["seconds"] = {{"circuit", r.circuit_seconds},
                    {"corpus", a.corpus_seconds},
                    {"induction", a.induction_seconds},
                    {"total", r.total_seconds}};
  out["threads"] = r.threads;
  return out;
}

}  // namespace headcount::report
