// The pruning curve and the conversion table as HTML: line charts from report/svg_chart and
// plain tables, from the JSON the commands saved (so a report can be redrawn without rerunning).
#include "report/compress_report.h"

#include <fstream>
#include <map>

#include "headcount/error.h"
#include "report/html.h"
#include "report/svg_chart.h"

namespace headcount::report {

using detail::concat;
using nlohmann::json;

json read_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(path, "cannot open");
  try {
    return json::parse(in);
  } catch (const json::parse_error& e) {
    fail(path, concat("malformed JSON (", e.what(), ")"));
  }
}

std::string prune_curve_section(const json& r) {
  check(r.is_object() && r.contains("points") && r["points"].is_array() && !r["points"].empty(),
        "prune curve", "a `headcount prune-curve` result with points", "something else");
  const json& pts = r["points"];
  const bool grad = pts[0].contains("gradient");
  const bool it = pts[0].contains("iterative"), rnd = pts[0].contains("random_mean"),
             phys = pts[0].contains("physical");
  report::LineChart chart{.id = "prune-curve",
                          .title = "STS-B test Spearman vs heads removed",
                          .x_label = "fraction of heads removed",
                          .y_label = "Spearman x100"};
  auto series = [&](const std::string& name, const char* key, const char* err = nullptr) {
    report::Series s{.name = name};
    for (const json& p : pts) {
      s.x.push_back(p.at("fraction").get<double>());
      s.y.push_back(p.at(key).get<double>());
      if (err) s.error.push_back(p.at(err).get<double>());
    }
    chart.series.push_back(s);
  };
  series("ablation ranking", "ablation");
  if (it) series("iterative re-ranking", "iterative");
  if (grad) series("gradient ranking (Michel et al.)", "gradient");
  if (rnd) series("random orders (mean +- std)", "random_mean", "random_std");
  const double base = pts[0].at("ablation").get<double>();
  chart.series.push_back(
      {.name = "Michel et al. 2019: 40% of BERT's heads without noticeable loss (their claim)",
       .x = {0.0, 0.4},
       .y = {base, base},
       .dashed = true});
  std::string s = concat(
      "<h3>Pruning heads physically</h3>\n<p>Rankings on <code>", escape(r.value("rank_file", "?")),
      "</code> (iterative re-ranking on its first ", r.value("iterative_rank_pairs", 0),
      " pairs); scores on held-out <code>", escape(r.value("test_file", "?")),
      "</code>. One head always stays per layer. The dashed line is Michel, Levy and Neubig's "
      "(2019) "
      "finding for BERT on MNLI, drawn at this model's unpruned score.</p>\n<div class=\"flex\">",
      report::line_chart_svg(chart), "<table><tr><th>removed</th><th>heads</th><th>ablation</th>");
  if (phys) s += "<th>same, pruned physically</th>";
  if (it) s += "<th>iterative</th>";
  if (grad) s += "<th>gradient</th>";
  if (rnd) s += "<th>random (mean &plusmn; std)</th>";
  s += "</tr>\n";
  for (const json& p : pts) {
    s += concat("<tr><td>", fixed(100 * p.at("fraction").get<double>(), 0), "%</td><td>",
                p.at("heads_removed").get<std::int64_t>(), "</td><td>",
                fixed(p.at("ablation").get<double>(), 2), "</td>");
    if (phys) s += concat("<td>", fixed(p.at("physical").get<double>(), 2), "</td>");
    if (it) s += concat("<td>", fixed(p.at("iterative").get<double>(), 2), "</td>");
    if (grad) s += concat("<td>", fixed(p.at("gradient").get<double>(), 2), "</td>");
    if (rnd)
      s += concat("<td>", fixed(p.at("random_mean").get<double>(), 2), " &plusmn; ",
                  fixed(p.at("random_std").get<double>(), 2), "</td>");
    s += "</tr>\n";
  }
  return s + "</table></div>\n";
}

std::string decoder_prune_curve_section(const json& r) {
  check(r.is_object() && r.contains("points") && r["points"].is_array() && !r["points"].empty() &&
            r.contains("query_heads_per_group"),
        "decoder prune curve", "a `headcount prune-curve --model FILE.gguf` result",
        "something else");
  const json& pts = r["points"];
  const bool rnd = pts[0].contains("random_mean_nll");
  report::LineChart chart{.id = "decoder-prune-curve",
                          .title = "test NLL vs K/V groups removed",
                          .x_label = "fraction of K/V groups removed",
                          .y_label = "nats per token"};
  report::Series ablation{.name = "ablation order"}, random{.name = "random ± std"};
  for (const json& p : pts) {
    ablation.x.push_back(p.at("fraction").get<double>());
    ablation.y.push_back(p.at("ablation").at("nll").get<double>());
    if (rnd) {
      random.x.push_back(p.at("fraction").get<double>());
      random.y.push_back(p.at("random_mean_nll").get<double>());
      random.error.push_back(p.at("random_std_nll").get<double>());
    }
  }
  chart.series.push_back(ablation);
  if (rnd) chart.series.push_back(random);
  std::string s =
      concat("<h3>Removing K/V groups physically</h3>\n<p>The unit is a whole K/V group (",
             r.at("query_heads_per_group").get<std::int64_t>(),
             " query heads and their K/V head). Ranking by ablation on the first ",
             r.at("dev_tokens").get<std::int64_t>(),
             " tokens of the text; every point a physically "
             "pruned model scored on the next ",
             r.at("test_tokens").get<std::int64_t>(), " tokens (windows of ",
             r.at("context").get<std::int64_t>(),
             "). One group always stays per layer.</p>\n<div class=\"flex\">",
             report::line_chart_svg(chart),
             "<table><tr><th>removed</th><th>groups</th><th>ablation: perplexity</th><th>NLL</th>");
  if (rnd) s += "<th>random NLL (mean &plusmn; std)</th>";
  const bool copy = pts[0].at("ablation").contains("in_context");
  if (copy) s += "<th>in-context loss drop: ablation</th>";
  if (copy && rnd) s += "<th>random (mean &plusmn; std)</th>";
  s += "<th>KV B/token</th></tr>\n";
  for (const json& p : pts) {
    s += concat("<tr><td>", fixed(100 * p.at("fraction").get<double>(), 0), "%</td><td>",
                p.at("groups_removed").get<std::int64_t>(), "</td><td>",
                fixed(p.at("ablation").at("perplexity").get<double>(), 2), "</td><td>",
                fixed(p.at("ablation").at("nll").get<double>(), 3), "</td>");
    if (rnd)
      s += concat("<td>", fixed(p.at("random_mean_nll").get<double>(), 3), " &plusmn; ",
                  fixed(p.at("random_std_nll").get<double>(), 3), "</td>");
    if (copy)
      s += concat("<td>", fixed(p.at("ablation").at("in_context").at("drop").get<double>(), 2),
                  "</td>");
    if (copy && rnd)
      s += concat("<td>", fixed(p.at("random_mean_in_context_drop").get<double>(), 2), " &plusmn; ",
                  fixed(p.at("random_std_in_context_drop").get<double>(), 2), "</td>");
    s += concat("<td>", p.at("kv_cache_bytes_per_token").get<std::int64_t>(), "</td></tr>\n");
  }
  s += "</table></div>\n";
  if (r.contains("speed")) {
    s += "<h3>Speed of the pruned models</h3>\n<table><tr><th>groups removed</th><th>prefill "
         "tok/s</th><th>speed-up</th><th>MAC ratio</th><th>decode tok/s</th><th>speed-up</th>"
         "<th>MAC ratio</th></tr>\n";
    for (const json& m : r["speed"])
      s += concat("<tr><td>", m.at("groups_removed").get<std::int64_t>(), "</td><td>",
                  fixed(m.at("prefill_tokens_per_second").get<double>(), 1), "</td><td>",
                  fixed(m.at("prefill_speedup").get<double>(), 2), "&times;</td><td>",
                  fixed(m.at("prefill_mac_ratio").get<double>(), 2), "&times;</td><td>",
                  fixed(m.at("decode_tokens_per_second").get<double>(), 1), "</td><td>",
                  fixed(m.at("decode_speedup").get<double>(), 2), "&times;</td><td>",
                  fixed(m.at("decode_mac_ratio").get<double>(), 2), "&times;</td></tr>\n");
    s += "</table>\n";
  }
  return s;
}

std::string convert_sweep_section(const json& r) {
  check(r.is_object() && r.contains("rows") && r["rows"].is_array() && !r["rows"].empty(),
        "convert sweep", "a `headcount convert-sweep` result with rows", "something else");
  std::map<std::string, report::Series> by_method;
  std::vector<std::string> order;
  for (const json& row : r["rows"]) {
    const std::string m = row.at("method").get<std::string>();
    if (!by_method.count(m)) order.push_back(m), by_method[m].name = m;
    by_method[m].x.push_back(row.at("kv_heads").get<double>());
    by_method[m].y.push_back(row.at("spearman").get<double>());
  }
  report::LineChart chart{.id = "convert-sweep",
                          .title = "STS-B test Spearman vs K/V heads per layer (no uptraining)",
                          .x_label = "K/V heads per layer",
                          .y_label = "Spearman x100",
                          .log2_x = true};
  for (const std::string& m : order) chart.series.push_back(by_method[m]);
  std::string s = concat(
      "<h3>Sharing K/V heads: MHA &rarr; GQA</h3>\n<p>Each layer's K/V heads pooled into G groups "
      "(mean: contiguous groups, Ainslie et al. 2023; aligned: each head rotated onto its group by "
      "orthogonal Procrustes first; clustered: groups by key-weight similarity), scored on <code>",
      escape(r.value("test_file", "?")), "</code>.</p>\n<div class=\"flex\">",
      report::line_chart_svg(chart),
      "<table><tr><th>K/V heads</th><th>method</th><th>Spearman</th><th>KV cache "
      "B/token</th></tr>\n");
  for (const json& row : r["rows"])
    s += concat("<tr><td>", row.at("kv_heads").get<std::int64_t>(), "</td><td>",
                escape(row.at("method").get<std::string>()), "</td><td>",
                fixed(row.at("spearman").get<double>(), 2), "</td><td>",
                row.at("kv_cache_bytes_per_token").get<std::int64_t>(), "</td></tr>\n");
  return s + "</table></div>\n";
}

}  // namespace headcount::report
