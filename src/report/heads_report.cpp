// The heads report page. Layout, top to bottom: summary, the model's cost table, the role grid
// (6 x 12 cells, coloured by role, with counts and the rules), the importance grid (ablation),
// the top and bottom heads, one attention heatmap per head for the chosen sentence, and the
// statistics table. Every picture is inline SVG built here.
#include "report/heads_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "headcount/error.h"
#include "report/compress_report.h"
#include "report/html.h"

namespace headcount::report {

using detail::concat;

namespace {

const char* role_colour(HeadRole role) {
  switch (role) {
    case HeadRole::previous_token:
      return "#1f77b4";
    case HeadRole::self:
      return "#8c564b";
    case HeadRole::next_token:
      return "#17becf";
    case HeadRole::positional:
      return "#9467bd";
    case HeadRole::cls_sink:
      return "#d62728";
    case HeadRole::sep_sink:
      return "#ff7f0e";
    case HeadRole::punctuation:
      return "#2ca02c";
    case HeadRole::broad:
      return "#bcbd22";
    case HeadRole::mixed:
      return "#d9d9d9";
  }
  return "#d9d9d9";
}

const char* role_short(HeadRole role) {
  switch (role) {
    case HeadRole::previous_token:
      return "prev";
    case HeadRole::self:
      return "self";
    case HeadRole::next_token:
      return "next";
    case HeadRole::positional:
      return "pos";
    case HeadRole::cls_sink:
      return "CLS";
    case HeadRole::sep_sink:
      return "SEP";
    case HeadRole::punctuation:
      return "punct";
    case HeadRole::broad:
      return "broad";
    case HeadRole::mixed:
      return "mixed";
  }
  return "";
}

std::string head_label(const HeadStatistics& s) { return concat("L", s.layer, " H", s.head); }

constexpr int kCell = kHeadsGridCell, kGridLeft = 34, kGridTop = 20;

// The encoder's grid: heads_grid_svg over the analysis' heads.
template <typename CellFn>
std::string grid_svg(const char* id, const HeadAnalysis& a, CellFn&& cell) {
  return heads_grid_svg(
      id, a.layers, a.heads, [&](std::int64_t layer, std::int64_t head, int x, int y) {
        return cell(a.per_head[static_cast<std::size_t>(layer * a.heads + head)], x, y);
      });
}

std::string role_grid(const HeadAnalysis& a) {
  return grid_svg("role-grid", a, [](const HeadStatistics& st, int x, int y) {
    const bool dark_text = st.role == HeadRole::mixed || st.role == HeadRole::broad;
    return concat("<g><title>", head_label(st), ": ", role_name(st.role), " (",
                  escape(role_target(st)), ", entropy ", fixed(st.normalized_entropy(), 2),
                  " of uniform)</title><rect class=\"cell\" x=\"", x, "\" y=\"", y, "\" width=\"",
                  kCell - 2, "\" height=\"", kCell - 2, "\" fill=\"", role_colour(st.role),
                  "\"/><text x=\"", x + kCell / 2 - 1, "\" y=\"", y + 18, "\" class=\"cell-text",
                  dark_text ? "" : " light", "\">", role_short(st.role), "</text><text x=\"",
                  x + kCell / 2 - 1, "\" y=\"", y + 33, "\" class=\"cell-small",
                  dark_text ? "" : " light", "\">", escape(role_target(st)), "</text></g>\n");
  });
}

std::string importance_grid(const HeadAnalysis& a, const HeadAblation& ab) {
  double scale = 1e-9;
  for (std::size_t k = 0; k < ab.spearman.size(); ++k)
    scale = std::max(scale, std::fabs(ab.importance(k)));
  return grid_svg("importance-grid", a, [&](const HeadStatistics& st, int x, int y) {
    const std::size_t k = static_cast<std::size_t>(st.layer * a.heads + st.head);
    const double v = ab.importance(k);
    const std::string fill = v >= 0 ? ramp(v / scale, 178, 24, 43) : ramp(-v / scale, 33, 102, 172);
    const bool light = std::fabs(v) / scale > 0.55;
    return concat(
        "<g><title>", head_label(st), ": Spearman ", fixed(ab.spearman[k], 2), " without it (",
        fixed(ab.baseline, 2), " with all heads)</title><rect class=\"cell\" x=\"", x, "\" y=\"", y,
        "\" width=\"", kCell - 2, "\" height=\"", kCell - 2, "\" fill=\"", fill, "\"/><text x=\"",
        x + kCell / 2 - 1, "\" y=\"", y + 26, "\" class=\"cell-text", light ? " light" : "", "\">",
        v >= 0 ? "" : "&#8722;", fixed(std::fabs(v), 2), "</text></g>\n");
  });
}

}  // namespace

std::string heads_grid_svg(
    const char* id, std::int64_t layers, std::int64_t heads,
    const std::function<std::string(std::int64_t, std::int64_t, int, int)>& cell) {
  const int width = kGridLeft + static_cast<int>(heads) * kCell + 2;
  const int height = kGridTop + static_cast<int>(layers) * kCell + 2;
  std::string s = concat("<svg id=\"", id, "\" class=\"grid\" width=\"", width, "\" height=\"",
                         height, "\" viewBox=\"0 0 ", width, ' ', height, "\" role=\"img\">\n");
  for (std::int64_t h = 0; h < heads; ++h)
    s += concat("<text x=\"", kGridLeft + h * kCell + kCell / 2, "\" y=\"14\" class=\"axis\">H", h,
                "</text>");
  for (std::int64_t l = 0; l < layers; ++l)
    s += concat("<text x=\"2\" y=\"", kGridTop + l * kCell + kCell / 2 + 4,
                "\" class=\"axis-left\">L", l, "</text>");
  s += '\n';
  for (std::int64_t l = 0; l < layers; ++l)
    for (std::int64_t h = 0; h < heads; ++h)
      s += cell(l, h, kGridLeft + static_cast<int>(h) * kCell,
                kGridTop + static_cast<int>(l) * kCell);
  return s + "</svg>\n";
}

std::string attention_heatmap_svg(const AttentionMaps& maps, std::int64_t layer,
                                  std::int64_t head) {
  const std::int64_t n = maps.n;
  const int cell = static_cast<int>(std::clamp<std::int64_t>(240 / n, 4, 12));
  const int label = 70, size = cell * static_cast<int>(n);
  const int width = label + size + 2, height = label + size + 2;
  // At most 10 characters (not bytes: a UTF-8 sequence is never cut).
  auto short_token = [](const std::string& t) {
    std::size_t chars = 0, at = 0;
    for (; at < t.size(); ++at)
      if ((static_cast<unsigned char>(t[at]) & 0xC0) != 0x80 && ++chars > 10) break;
    return at < t.size() ? t.substr(0, at) + "\u2026" : t;
  };
  std::string s = concat("<svg class=\"heatmap\" data-layer=\"", layer, "\" data-head=\"", head,
                         "\" data-n=\"", n, "\" width=\"", width, "\" height=\"", height,
                         "\" viewBox=\"0 0 ", width, ' ', height, "\">");
  const int font = std::min(cell, 10);
  for (std::int64_t i = 0; i < n; ++i) {
    const std::string tok = escape(short_token(maps.tokens[static_cast<std::size_t>(i)]));
    s += concat("<text class=\"tok\" font-size=\"", font, "\" x=\"", label - 3, "\" y=\"",
                label + i * cell + cell - 1, "\">", tok, "</text>");
    s += concat("<text class=\"tok-top\" font-size=\"", font, "\" transform=\"translate(",
                label + i * cell + cell - 1, ",", label - 3, ") rotate(-90)\">", tok, "</text>");
  }
  const float* p = maps.map(layer, head);
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < n; ++j) {
      const double v = p[i * n + j];
      s += concat("<rect class=\"cell\" x=\"", label + j * cell, "\" y=\"", label + i * cell,
                  "\" width=\"", cell, "\" height=\"", cell, "\" fill=\"",
                  ramp(std::sqrt(v), 8, 48, 107), "\"/>");
    }
  return s + "</svg>";
}

namespace {

const char* kStyle = R"(
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 24px; color: #222; max-width: 1400px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #ddd; }
pre { background: #f6f6f6; padding: 10px; font-size: 12px; overflow-x: auto; }
.axis { font-size: 11px; text-anchor: middle; fill: #555; }
.axis-left { font-size: 11px; text-anchor: start; fill: #555; }
.cell-text { font-size: 12px; text-anchor: middle; fill: #222; font-weight: 600; }
.cell-small { font-size: 9px; text-anchor: middle; fill: #333; }
.light { fill: #fff; }
.tok { text-anchor: end; fill: #333; font-family: ui-monospace, monospace; }
.tok-top { text-anchor: start; fill: #333; font-family: ui-monospace, monospace; }
table { border-collapse: collapse; font-size: 12px; }
th, td { padding: 2px 8px; text-align: right; border-bottom: 1px solid #eee; }
th { background: #f0f0f0; position: sticky; top: 0; }
td.l { text-align: left; }
.legend span.swatch { display: inline-block; width: 12px; height: 12px; margin-right: 4px; vertical-align: -1px; }
.legend li { list-style: none; margin: 2px 0; font-size: 13px; }
.layer { display: flex; flex-wrap: wrap; gap: 6px; }
figure { margin: 0; } figcaption { font-size: 11px; text-align: center; color: #444; }
.flex { display: flex; gap: 32px; flex-wrap: wrap; align-items: flex-start; }
#render-check { font-size: 11px; color: #888; }
)";

// Runs in the browser after layout: counts the heatmaps and grid cells that have a size on
// the page, so a headless browser's --dump-dom shows what actually rendered.
const char* kRenderCheck = R"(<script>
(function () {
  var maps = document.querySelectorAll('svg.heatmap'), ok = 0;
  for (var i = 0; i < maps.length; ++i) {
    var r = maps[i].getBoundingClientRect(), n = +maps[i].dataset.n;
    if (r.width > 0 && r.height > 0 && maps[i].querySelectorAll('rect.cell').length === n * n) ++ok;
  }
  function cells(id) {
    var g = document.getElementById(id);
    if (!g) return 0;
    var r = g.getBoundingClientRect();
    return r.width > 0 && r.height > 0 ? g.querySelectorAll('rect.cell').length : 0;
  }
  var out = document.getElementById('render-check');
  out.setAttribute('data-heatmaps', ok);
  out.setAttribute('data-role-cells', cells('role-grid'));
  out.setAttribute('data-importance-cells', cells('importance-grid'));
  var grid = document.getElementById('role-grid').getBoundingClientRect();
  out.setAttribute('data-role-grid', [grid.left, grid.top, grid.width, grid.height].map(Math.round).join(','));
  out.textContent = 'rendered: ' + ok + ' heatmaps, role grid ' + cells('role-grid') + ' cells, importance grid ' +
                    cells('importance-grid') + ' cells';
})();
</script>
)";

}  // namespace

const char* heads_page_style() { return kStyle; }
const char* heads_render_check_script() { return kRenderCheck; }

namespace {

std::string rank_table(const HeadsReport& r, const std::vector<std::size_t>& heads,
                       const char* title) {
  const HeadAblation& ab = *r.ablation;
  std::string s = concat("<table><caption>", title,
                         "</caption><tr><th>head</th><th>role</th><th>Spearman without</th>"
                         "<th>importance</th></tr>\n");
  for (std::size_t k : heads) {
    const HeadStatistics& st = r.analysis.per_head[k];
    s += concat("<tr><td class=\"l\">", head_label(st), "</td><td class=\"l\">", role_name(st.role),
                "</td><td>", fixed(ab.spearman[k], 2), "</td><td>", fixed(ab.importance(k), 2),
                "</td></tr>\n");
  }
  return s + "</table>\n";
}

// Spearman against heads removed, as a line chart and a table.
std::string pruning_section(const HeadsReport& r) {
  const std::int64_t total = r.analysis.layers * r.analysis.heads;
  double lo = 100, hi = 0;
  for (const PruningPoint& p : r.pruning) {
    lo = std::min(lo, p.spearman);
    hi = std::max(hi, p.spearman);
  }
  lo = std::floor(lo / 5) * 5;
  hi = std::ceil(hi / 5) * 5;
  if (hi <= lo) hi = lo + 5;
  const int w = 420, h = 220, left = 44, top = 12, plot_w = w - left - 12, plot_h = h - top - 36;
  auto px = [&](double removed) { return left + removed / static_cast<double>(total) * plot_w; };
  auto py = [&](double spearman) { return top + (hi - spearman) / (hi - lo) * plot_h; };
  std::string svg = concat("<svg id=\"pruning-chart\" width=\"", w, "\" height=\"", h,
                           "\" viewBox=\"0 0 ", w, ' ', h, "\">");
  for (double y = lo; y <= hi + 1e-9; y += 5)
    svg += concat("<line x1=\"", left, "\" x2=\"", left + plot_w, "\" y1=\"", fixed(py(y), 1),
                  "\" y2=\"", fixed(py(y), 1), "\" stroke=\"#e5e5e5\"/><text class=\"axis\" x=\"",
                  left - 16, "\" y=\"", fixed(py(y) + 4, 1), "\">", fixed(y, 0), "</text>");
  for (std::int64_t x = 0; x <= total; x += 12)
    svg += concat("<text class=\"axis\" x=\"", fixed(px(static_cast<double>(x)), 1), "\" y=\"",
                  top + plot_h + 16, "\">", x, "</text>");
  svg += concat("<text class=\"axis\" x=\"", left + plot_w / 2, "\" y=\"", h - 2,
                "\">heads removed (least important first)</text>");
  std::string points;
  for (const PruningPoint& p : r.pruning) {
    points += concat(fixed(px(static_cast<double>(p.heads_removed)), 1), ',',
                     fixed(py(p.spearman), 1), ' ');
    svg += concat("<circle cx=\"", fixed(px(static_cast<double>(p.heads_removed)), 1), "\" cy=\"",
                  fixed(py(p.spearman), 1), "\" r=\"3.5\" fill=\"#b2182b\"><title>",
                  p.heads_removed, " heads removed: ", fixed(p.spearman, 2), "</title></circle>");
  }
  svg += concat("<polyline fill=\"none\" stroke=\"#b2182b\" stroke-width=\"2\" points=\"", points,
                "\"/></svg>");
  std::string table =
      "<table><tr><th>heads removed</th><th>Spearman &times;100</th><th>change</th></tr>\n";
  for (const PruningPoint& p : r.pruning)
    table += concat("<tr><td>", p.heads_removed, " of ", total, "</td><td>", fixed(p.spearman, 2),
                    "</td><td>", fixed(p.spearman - r.pruning.front().spearman, 2), "</td></tr>\n");
  table += "</table>\n";
  return concat(
      "<h3>Pruning the least important heads together</h3>\n<p>Heads ranked by the ablation above, "
      "removed "
      "together from the least important up, and scored on <code>",
      escape(r.prune_file), "</code>, pairs the ranking never saw.</p>\n<div class=\"flex\">", svg,
      table, "</div>\n");
}

}  // namespace

std::string render_heads_html(const HeadsReport& r) {
  const HeadAnalysis& a = r.analysis;
  std::map<HeadRole, int> counts;
  for (const HeadStatistics& st : a.per_head) ++counts[st.role];

  std::string s =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>headcount: what "
      "the heads do</title>\n<style>";
  s += kStyle;
  s += "</style></head><body>\n";
  s += concat("<h1>What the ", a.layers * a.heads, " heads of ", escape(r.model_dir), " do</h1>\n");
  s += concat("<p>Statistics over ", a.sentences, " sentences (", a.tokens, " tokens) from ");
  for (std::size_t i = 0; i < r.corpus.size(); ++i)
    s += concat(i ? ", " : "", "<code>", escape(r.corpus[i]), "</code>");
  s += concat(
      ", each averaged over every token (query row) of every sentence, computed ",
      r.stats_kernel == Kernel::streaming
          ? "by the streaming kernel's second pass over its log-sum-exp (no n&#178; probabilities "
            "stored)"
          : "from the reference kernel's probabilities (all h&middot;n&#178; of them materialised)",
      " in ", fixed(r.stats_seconds, 1),
      " s. Measures after Clark et al. 2019, <i>What Does BERT Look At? An Analysis of BERT's "
      "Attention</i>.</p>\n");

  s += "<h2>Roles</h2>\n<div class=\"flex\"><div>" + role_grid(a) + "</div><ul class=\"legend\">\n";
  for (HeadRole role : kAllHeadRoles)
    s += concat("<li><span class=\"swatch\" style=\"background:", role_colour(role),
                "\"></span><b>", role_name(role), "</b>: ", counts[role], " heads &mdash; ",
                escape(role_rule(role)), "</li>\n");
  s += "</ul></div>\n<p>Each cell: the role, then the head's largest target and its share of "
       "attention. Rules are "
       "applied in order: a target (offset &minus;3..+3, [CLS], [SEP], punctuation) with &ge; 50% "
       "of the attention "
       "names the role; else broad if the entropy is &ge; 90% of the uniform row's; else "
       "mixed.</p>\n";

  s += "<h2>Importance (ablation)</h2>\n";
  if (r.ablation) {
    const HeadAblation& ab = *r.ablation;
    s += concat(
        "<p>STS-B Spearman &times;100 lost when one head alone is removed (its slice of the concat "
        "buffer "
        "zeroed before W<sub>O</sub>), on ",
        ab.pairs, " pairs of <code>", escape(r.sts_file),
        "</code>; with all heads: ", fixed(ab.baseline, 2),
        ". Red: the score drops without the head; blue: it "
        "rises. ",
        fixed(r.ablation_seconds, 0), " s for ", ab.spearman.size() + 1, " evaluations.</p>\n");
    s += "<div class=\"flex\"><div>" + importance_grid(a, ab) + "</div>";
    const std::vector<std::size_t> order = most_important_first(ab);
    const std::size_t top = std::min<std::size_t>(10, order.size());
    s += rank_table(r, {order.begin(), order.begin() + static_cast<std::ptrdiff_t>(top)},
                    "Top 10: removing them hurts most");
    s += rank_table(r, {order.end() - static_cast<std::ptrdiff_t>(top), order.end()},
                    "Bottom 10: the least needed");
    s += "</div>\n";
    if (!r.pruning.empty()) s += pruning_section(r);
  } else {
    s += "<p>Not measured: run <code>headcount heads --ablate</code> to remove each head in turn "
         "and measure STS-B "
         "Spearman.</p>\n";
  }

  if (!r.prune_curve.is_null() || !r.convert_sweep.is_null()) {
    s += "<h2>Making the model smaller</h2>\n";
    if (!r.prune_curve.is_null()) s += prune_curve_section(r.prune_curve);
    if (!r.convert_sweep.is_null()) s += convert_sweep_section(r.convert_sweep);
  }

  s += concat(
      "<h2>Cost of one layer at the sentence's length (", r.maps.n,
      " tokens)</h2>\n<p>The seeds' table: split into ", r.analysis.heads,
      " heads, every weight and multiply-add equals that of one head of the full width; only the "
      "scores "
      "held at once (h&middot;n&#178; on the reference path) grow with the head count.</p>\n<pre>",
      escape(r.cost_table), "</pre>\n");

  s += concat("<h2>Attention of every head on one sentence</h2>\n<p>&ldquo;", escape(r.text),
              "&rdquo; &mdash; ", r.maps.n,
              " tokens. Row: the query token; column: the key it attends to; colour &prop; "
              "&radic;p (white 0, dark "
              "blue 1). Probabilities from the reference kernel.</p>\n");
  for (std::int64_t l = 0; l < a.layers; ++l) {
    s += concat("<h3>Layer ", l, "</h3>\n<div class=\"layer\">\n");
    for (std::int64_t h = 0; h < a.heads; ++h) {
      const HeadStatistics& st = a.per_head[static_cast<std::size_t>(l * a.heads + h)];
      s += concat("<figure>", attention_heatmap_svg(r.maps, st.layer, st.head), "<figcaption>",
                  head_label(st), " &middot; ", role_name(st.role), "</figcaption></figure>\n");
    }
    s += "</div>\n";
  }

  s += "<h2>Statistics</h2>\n<table "
       "id=\"stats\"><tr><th>layer</th><th>head</th><th>role</th><th>prev</th><th>self</th>"
       "<th>next</th><th>[CLS]</th><th>[SEP]</th><th>punct</th><th>entropy</th><th>uniform</"
       "th><th>ratio</th>"
       "<th>distance</th><th>importance</th></tr>\n";
  for (std::size_t k = 0; k < a.per_head.size(); ++k) {
    const HeadStatistics& st = a.per_head[k];
    s += concat(
        "<tr><td>", st.layer, "</td><td>", st.head, "</td><td class=\"l\">", role_name(st.role),
        "</td><td>", fixed(st.previous(), 3), "</td><td>", fixed(st.self(), 3), "</td><td>",
        fixed(st.next(), 3), "</td><td>", fixed(st.cls, 3), "</td><td>", fixed(st.sep, 3),
        "</td><td>", fixed(st.punctuation, 3), "</td><td>", fixed(st.entropy, 3), "</td><td>",
        fixed(st.uniform_entropy, 3), "</td><td>", fixed(st.normalized_entropy(), 3), "</td><td>",
        fixed(st.distance, 2), "</td><td>",
        r.ablation ? fixed(r.ablation->importance(k), 2) : std::string("&ndash;"), "</td></tr>\n");
  }
  s += "</table>\n<p>prev/self/next: mean attention to offsets &minus;1, 0, +1; [CLS], [SEP], "
       "punct: to those tokens; "
       "entropy in nats, uniform = ln(tokens seen), ratio = entropy / uniform; distance: mean |j "
       "&minus; i| in tokens. "
       "Generated by <code>headcount heads</code>.</p>\n";
  s += "<p><output id=\"render-check\"></output></p>\n";
  s += kRenderCheck;
  s += "</body></html>\n";
  return s;
}

nlohmann::json heads_json(const HeadsReport& r) {
  using nlohmann::json;
  const HeadAnalysis& a = r.analysis;
  json out;
  out["model"] = r.model_dir;
  out["corpus"] = r.corpus;
  out["sentences"] = a.sentences;
  out["tokens"] = a.tokens;
  out["layers"] = a.layers;
  out["stats_kernel"] = kernel_name(r.stats_kernel);
  out["heads_per_layer"] = a.heads;
  json roles = json::object();
  for (HeadRole role : kAllHeadRoles) roles[role_name(role)] = 0;
  for (const HeadStatistics& st : a.per_head)
    roles[role_name(st.role)] = roles[role_name(st.role)].get<int>() + 1;
  out["role_counts"] = roles;
  if (r.ablation) {
    out["ablation"] = {{"sts_file", r.sts_file},
                       {"pairs", r.ablation->pairs},
                       {"baseline_spearman", r.ablation->baseline}};
    if (!r.pruning.empty()) {
      json points = json::array();
      for (const PruningPoint& p : r.pruning)
        points.push_back({{"heads_removed", p.heads_removed}, {"spearman", p.spearman}});
      out["pruning"] = {{"sts_file", r.prune_file}, {"points", points}};
    }
  }
  std::vector<std::size_t> rank(a.per_head.size(), 0);
  if (r.ablation) {
    const std::vector<std::size_t> order = most_important_first(*r.ablation);
    for (std::size_t i = 0; i < order.size(); ++i) rank[order[i]] = i + 1;
  }
  json heads = json::array();
  for (std::size_t k = 0; k < a.per_head.size(); ++k) {
    const HeadStatistics& st = a.per_head[k];
    json offsets = json::object();
    for (std::size_t o = 0; o < kHeadOffsets.size(); ++o)
      offsets[std::to_string(kHeadOffsets[o])] = st.offsets[o];
    json h = {{"layer", st.layer},
              {"head", st.head},
              {"role", role_name(st.role)},
              {"target", role_target(st)},
              {"rows", st.rows},
              {"previous", st.previous()},
              {"self", st.self()},
              {"next", st.next()},
              {"offsets", offsets},
              {"cls", st.cls},
              {"sep", st.sep},
              {"punctuation", st.punctuation},
              {"entropy", st.entropy},
              {"uniform_entropy", st.uniform_entropy},
              {"normalized_entropy", st.normalized_entropy()},
              {"distance", st.distance},
              {"mass", st.mass}};
    if (r.ablation) {
      h["spearman_without"] = r.ablation->spearman[k];
      h["importance"] = r.ablation->importance(k);
      h["importance_rank"] = rank[k];  // 1: the head whose removal costs most
    }
    heads.push_back(h);
  }
  out["heads"] = heads;
  return out;
}

}  // namespace headcount::report
