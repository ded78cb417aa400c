// experiment_page (page.h): sections in the order the header lists, each a function of the JSON.
#include "experiments/page.h"

#include <cmath>
#include <map>
#include <set>

#include "experiments/cost_measured.h"
#include "experiments/result.h"
#include "headcount/error.h"
#include "report/html.h"
#include "report/svg_chart.h"

namespace headcount::experiments {

using detail::concat;
using nlohmann::json;
using report::escape;
using report::fixed;

namespace {

constexpr const char* kCss =
    ".verdict{border:2px solid #999;border-radius:6px;padding:8px 12px;margin:10px "
    "0;max-width:980px}"
    ".verdict.confirmed{border-color:#2a8a2a;background:#f1faf1}.verdict.refuted{border-color:#b22;"
    "background:#fdf1f1}"
    ".verdict.not-shown{border-color:#a80;background:#fdf9ee}.verdict h3{margin:2px 0 6px 0}"
    ".rule{color:#444;font-size:90%}.num{text-align:right;font-variant-numeric:tabular-nums}"
    "table{border-collapse:collapse;margin:6px 0}td,th{border:1px solid #ddd;padding:2px "
    "6px;font-size:90%}"
    ".maps{display:flex;flex-wrap:wrap;gap:10px}.charts{display:flex;flex-wrap:wrap;gap:12px}";

std::string g(double v) {  // a general number: 4 significant decimals around 1, more when tiny
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a >= 1e6) return concat(static_cast<long long>(std::llround(v)));
  if (a >= 100) return fixed(v, 1);
  if (a >= 0.01) return fixed(v, 4);
  return fixed(v, 6);
}

std::string thousands(std::int64_t v) {
  std::string digits = std::to_string(v < 0 ? -v : v), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return v < 0 ? "-" + out : out;
}

std::string label_text(const json& labels) {
  std::string s;
  for (auto it = labels.begin(); it != labels.end(); ++it)
    s += concat(s.empty() ? "" : ", ", it.key(), " ",
                it->is_string() ? it->get<std::string>() : it->dump());
  return s;
}

std::string series_of(const json& cell, const std::string& series_label) {
  const json& labels = cell.at("labels");
  if (!labels.contains(series_label)) return "all";
  const json& v = labels.at(series_label);
  return v.is_string() ? v.get<std::string>() : v.dump();
}

std::string tables_html(const json& tables);

std::string css_class(const std::string& verdict) {
  return verdict == "not shown" ? "not-shown" : verdict;
}

std::string verdict_boxes(const json& r) {
  std::string s = "<h2>Verdicts</h2>";
  if (r.at("verdicts").empty()) s += "<p>This experiment reports and judges no claim.</p>";
  for (const json& v : r.at("verdicts")) {
    const std::string verdict = v.at("verdict").get<std::string>();
    s += concat("<div class=\"verdict ", css_class(verdict), "\" data-claim=\"",
                escape(v.at("id").get<std::string>()), "\" data-verdict=\"", escape(verdict),
                "\"><h3>", escape(v.at("id").get<std::string>()), ": ", escape(verdict), "</h3><p>",
                escape(v.at("claim").get<std::string>()),
                "</p><p class=\"rule\">Rule: ", escape(v.at("rule").get<std::string>()), "</p><p>",
                escape(v.at("reason").get<std::string>()), "</p>");
    if (!v.at("comparisons").empty()) {
      s += "<table><tr><th>A</th><th>mean ± std</th><th>B</th><th>mean ± "
           "std</th><th>gap</th><th>2·max std</th>"
           "<th>floor</th><th>counts</th><th>winner</th></tr>";
      for (const json& c : v.at("comparisons"))
        s += concat(
            "<tr><td>", escape(c.at("a").get<std::string>()), "</td><td class=\"num\">",
            g(c.at("mean_a")), " ± ", g(c.at("std_a")), "</td><td>",
            escape(c.at("b").get<std::string>()), "</td><td class=\"num\">", g(c.at("mean_b")),
            " ± ", g(c.at("std_b")), "</td><td class=\"num\">", g(c.at("gap")),
            "</td><td class=\"num\">", g(c.at("noise")), "</td><td class=\"num\">",
            g(c.at("floor")), "</td><td>", c.at("counts").get<bool>() ? "yes" : "no", "</td><td>",
            escape(c.at("winner").get<std::string>().empty() ? "-"
                                                             : c.at("winner").get<std::string>()),
            "</td></tr>");
      s += "</table>";
    }
    if (v.contains("numbers") && v.at("numbers").contains("tables"))
      s += tables_html(v.at("numbers").at("tables"));
    s += "</div>";
  }
  return s;
}

std::string metric_chart(const json& r) {
  const json& e = r.at("experiment");
  const std::string sweep = e.at("sweep_label"), series_label = e.at("series_label");
  std::map<std::string, report::Series> series;
  std::vector<std::string> order;
  for (const json& c : r.at("cells")) {
    const json& labels = c.at("labels");
    if (!labels.contains(sweep) || !labels.at(sweep).is_number() || !c.contains("stats")) continue;
    const std::string name = series_of(c, series_label);
    if (!series.count(name)) order.push_back(name), series[name].name = name;
    series[name].x.push_back(labels.at(sweep).get<double>());
    series[name].y.push_back(c.at("stats").at("mean").get<double>());
    series[name].error.push_back(c.at("stats").at("std").get<double>());
  }
  if (order.empty()) return "";
  bool positive = true;
  report::LineChart chart{
      .id = "metric-vs-" + sweep,
      .title = concat(e.at("metric").get<std::string>(), " vs ", sweep, " (mean ± std over seeds)"),
      .x_label = sweep + " (log2 axis)",
      .y_label = e.at("metric").get<std::string>(),
      .width = 640,
      .height = 360};
  for (const std::string& name : order) {
    for (double x : series[name].x) positive = positive && x > 0;
    chart.series.push_back(series[name]);
  }
  chart.log2_x = positive;
  if (!positive) chart.x_label = sweep;
  return "<h2>Metric</h2>" + report::line_chart_svg(chart);
}

std::string cell_table(const json& r) {
  std::map<std::string, json> timing;
  if (r.contains("timing"))
    for (const json& t : r.at("timing").at("cells")) timing[t.at("id").get<std::string>()] = t;
  std::string s = concat(
      "<h2>Cells</h2><table data-cells=\"", r.at("cells").size(), "\" data-runs=\"",
      r.at("runs").size(), "\"><tr><th>cell</th><th>labels</th><th>",
      escape(r.at("experiment").at("metric").get<std::string>()),
      " mean ± std</th><th>per seed</th><th>weights</th><th>forward multiply-adds / step</th>"
      "<th>train multiply-adds / step</th><th>KV bytes / token</th><th>median ms / step [min, max "
      "over seeds]</th></tr>");
  for (const json& c : r.at("cells")) {
    const std::string id = c.at("id");
    s += concat("<tr><td>", escape(id), "</td><td>", escape(label_text(c.at("labels"))), "</td>");
    if (c.contains("stats")) {
      std::string values;
      for (const json& v : c.at("stats").at("values"))
        values += (values.empty() ? "" : ", ") + g(v);
      s += concat("<td class=\"num\">", g(c.at("stats").at("mean")), " ± ",
                  g(c.at("stats").at("std")), "</td><td>", values, "</td>");
    } else {
      s += "<td></td><td></td>";
    }
    if (c.contains("cost")) {
      const json& k = c.at("cost");
      s += concat("<td class=\"num\">", thousands(k.at("weights")), "</td><td class=\"num\">",
                  thousands(k.at("forward_macs")), "</td><td class=\"num\">",
                  thousands(k.at("train_macs")), "</td><td class=\"num\">",
                  thousands(k.at("kv_cache_bytes_per_token")), "</td>");
    } else {
      s += "<td></td><td></td><td></td><td></td>";
    }
    if (timing.count(id)) {
      const json& t = timing[id];
      s += concat("<td class=\"num\">", fixed(1e3 * t.at("median_step_seconds").get<double>(), 2),
                  " [", fixed(1e3 * t.at("min_step_seconds").get<double>(), 2), ", ",
                  fixed(1e3 * t.at("max_step_seconds").get<double>(), 2), "]</td>");
    } else {
      s += "<td></td>";
    }
    s += "</tr>";
  }
  return s +
         "</table><p class=\"rule\">Multiply-adds: the cost model (cost.h) summed over layers "
         "(attention block + "
         "feed-forward) plus the LM head at the run's batch and context; train = 3 × forward. Time "
         "per step: the "
         "median over a run's steps, then the median [min, max] over seeds; measured, not part of "
         "any verdict.</p>";
}

std::string curves(const json& r) {
  const std::string series_label = r.at("experiment").at("series_label");
  std::map<std::string, report::LineChart> charts;
  std::vector<std::string> order;
  for (std::size_t ci = 0; ci < r.at("cells").size(); ++ci) {
    const json& c = r.at("cells")[ci];
    const std::string id = c.at("id"), name = series_of(c, series_label);
    std::vector<double> x, sum;
    int n = 0;
    for (const json& run : r.at("runs")) {
      if (run.at("cell") != id) continue;
      const auto& steps = run.at("curve").at("step");
      const auto& loss = run.at("curve").at("loss");
      if (n == 0) x.assign(steps.begin(), steps.end()), sum.assign(x.size(), 0.0);
      if (loss.size() != sum.size()) continue;
      for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += loss[i].get<double>();
      ++n;
    }
    if (n == 0) continue;
    for (double& v : sum) v /= n;
    if (!charts.count(name)) {
      order.push_back(name);
      charts[name] = {.id = "curves-" + name,
                      .title = concat("training loss (mean over seeds), ", series_label, " ", name),
                      .x_label = "step",
                      .y_label = "loss"};
    }
    charts[name].series.push_back({.name = id, .x = x, .y = sum});
  }
  std::string s = "<h2>Training curves</h2><div class=\"charts\">";
  for (const std::string& name : order) s += report::line_chart_svg(charts[name]);
  return s + "</div>";
}

// Numeric leaves of a measures object, dotted names (arrays are left to their own sections).
// (attention maps have their own section too).
void numeric_leaves(const json& j, const std::string& prefix, std::map<std::string, double>& out) {
  if (j.is_number())
    out[prefix] = j.get<double>();
  else if (j.is_object())
    for (auto it = j.begin(); it != j.end(); ++it)
      if (it.key() != "attention_maps")
        numeric_leaves(*it, prefix.empty() ? it.key() : prefix + "." + it.key(), out);
}

std::string measures_table(const json& r) {
  std::vector<std::string> names;
  std::set<std::string> seen;
  std::map<std::string, std::map<std::string, std::vector<double>>>
      per_cell;  // cell -> name -> values
  for (const json& run : r.at("runs")) {
    std::map<std::string, double> leaves;
    numeric_leaves(run.at("measures"), "", leaves);
    for (const auto& [name, value] : leaves) {
      if (seen.insert(name).second) names.push_back(name);
      per_cell[run.at("cell").get<std::string>()][name].push_back(value);
    }
  }
  if (names.empty()) return "";
  std::string s = "<h2>Per-run measures (mean ± std over seeds)</h2><table><tr><th>cell</th>";
  for (const std::string& n : names) s += "<th>" + escape(n) + "</th>";
  s += "</tr>";
  for (const json& c : r.at("cells")) {
    const std::string id = c.at("id");
    s += "<tr><td>" + escape(id) + "</td>";
    for (const std::string& n : names) {
      const std::vector<double>& v = per_cell[id][n];
      if (v.empty()) {
        s += "<td></td>";
        continue;
      }
      double mean = 0, sq = 0;
      for (double x : v) mean += x;
      mean /= static_cast<double>(v.size());
      for (double x : v) sq += (x - mean) * (x - mean);
      const double sd = v.size() > 1 ? std::sqrt(sq / static_cast<double>(v.size() - 1)) : 0;
      s += concat("<td class=\"num\">", g(mean), " ± ", g(sd), "</td>");
    }
    s += "</tr>";
  }
  return s + "</table>";
}

void find_maps(const json& j, std::vector<const json*>& out) {
  if (!j.is_object()) return;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "attention_maps" && it->is_object() && it->contains("maps"))
      out.push_back(&*it);
    else
      find_maps(*it, out);
  }
}

std::string maps_section(const json& r) {
  std::string s;
  int index = 0;
  for (const json& run : r.at("runs")) {
    std::vector<const json*> found;
    find_maps(run.at("measures"), found);
    for (const json* m : found) {
      const int P = m->at("positions").get<int>();
      s += concat("<h3>cell ", escape(run.at("cell").get<std::string>()), ", seed ",
                  run.at("seed").dump(), " (validation sequence ", m->at("sequence").dump(),
                  ", first ", P, " positions)</h3><div class=\"maps\">");
      for (const json& map : m->at("maps")) {
        report::Heatmap h{
            .id = concat("map-", index++),
            .title = concat("layer ", map.at("layer").dump(), " head ", map.at("head").dump()),
            .rows = P,
            .cols = P,
            .values = map.at("values").get<std::vector<double>>(),
            .cell = 4};
        s += report::heatmap_svg(h);
      }
      s += "</div>";
    }
  }
  return s.empty() ? ""
                   : "<h2>Attention maps of trained heads</h2><p class=\"rule\">Rows are queries, "
                     "columns keys; "
                     "white 0, dark 1.</p>" +
                         s;
}

// Tables as {"title", "columns", "rows", "note"?} (the experiments' extra and their verdicts'
// numbers).
std::string tables_html(const json& tables) {
  std::string s;
  for (const json& t : tables) {
    s += "<h2>" + escape(t.at("title").get<std::string>()) + "</h2><table><tr>";
    for (const json& c : t.at("columns")) s += "<th>" + escape(c.get<std::string>()) + "</th>";
    s += "</tr>";
    for (const json& row : t.at("rows")) {
      s += "<tr>";
      for (const json& v : row)
        s += v.is_number_integer()
                 ? "<td class=\"num\">" + thousands(v.get<std::int64_t>()) + "</td>"
             : v.is_number()
                 ? "<td class=\"num\">" + g(v.get<double>()) + "</td>"
                 : "<td>" + escape(v.is_string() ? v.get<std::string>() : v.dump()) + "</td>";
      s += "</tr>";
    }
    s += "</table>";
    if (t.contains("note"))
      s += "<p class=\"rule\">" + escape(t.at("note").get<std::string>()) + "</p>";
  }
  return s;
}

// Which stage ran and under which pre-registration (rule R8): "not pre-registered" otherwise.
std::string prereg_line(const json& r) {
  std::string s = "<p class=\"rule\" data-prereg=\"";
  const json prereg = r.value("prereg", json(nullptr));
  const bool registered = prereg.is_object() && prereg.value("preregistered", false);
  s += registered ? "yes" : "no";
  s += "\">";
  if (r.contains("settings") && r.at("settings").contains("stage"))
    s += concat("Stage: ", escape(r.at("settings").at("stage").get<std::string>()), ". ");
  if (r.contains("settings") && r.at("settings").value("quick", false))
    s += "A --quick smoke run: not evidence. ";
  s += registered ? concat("Pre-registered: ", escape(prereg.at("path").get<std::string>()),
                           " (git blob ", escape(prereg.at("blob").get<std::string>()), ").")
                  : "Not pre-registered.";
  return s + "</p>";
}

std::string extra_section(const json& r) {
  const json& extra = r.at("extra");
  std::string s;
  if (extra.contains("tables")) s += tables_html(extra.at("tables"));
  if (extra.contains("charts")) {
    s += "<div class=\"charts\">";
    int index = 0;
    for (const json& c : extra.at("charts")) {
      report::LineChart chart{.id = concat("extra-", index++),
                              .title = c.at("title"),
                              .x_label = c.at("x_label"),
                              .y_label = c.at("y_label"),
                              .log2_x = c.value("log2_x", false)};
      for (const json& series : c.at("series"))
        chart.series.push_back({.name = series.at("name"),
                                .x = series.at("x").get<std::vector<double>>(),
                                .y = series.at("y").get<std::vector<double>>(),
                                .error = series.value("error", std::vector<double>{}),
                                .dashed = series.value("dashed", false)});
      s += report::line_chart_svg(chart);
    }
    s += "</div>";
  }
  return s;
}

}  // namespace

std::string experiment_page(const json& r) {
  HEADCOUNT_CHECK(r.is_object() && r.value("format", "") == kResultFormat, "experiment page",
                  concat("a ", kResultFormat, " document"),
                  r.is_object() ? r.value("format", "no format") : "not an object");
  const json& e = r.at("experiment");
  const json& settings = r.at("settings");
  const std::string name = e.at("name");
  std::string body =
      concat("<h1>Experiment ", escape(name), "</h1><p>", escape(e.at("claim").get<std::string>()),
             "</p><p class=\"rule\">Budget: ", escape(e.at("budget").get<std::string>()), "</p>");
  body += concat(
      "<p class=\"rule\">", settings.at("seeds").dump(), " seeds per cell, ", r.at("cells").size(),
      " cells, ", r.at("runs").size(), " runs, ", settings.at("threads").dump(), " threads",
      settings.at("quick").get<bool>() ? ", --quick" : "",
      r.contains("timing")
          ? concat(", ", fixed(r.at("timing").at("seconds").get<double>(), 0), " s in all")
          : "",
      ". Task: ", escape(r.at("task").value("name", "?")), ". Metric: final ",
      escape(e.at("metric").get<std::string>()), " on every validation batch.</p>");
  body += prereg_line(r);
  body += verdict_boxes(r) + metric_chart(r) + cell_table(r) + extra_section(r) + curves(r) +
          measures_table(r) + maps_section(r);
  return report::page("headcount experiment " + name, kCss, body);
}

std::string cost_measured_page(const json& r) {
  HEADCOUNT_CHECK(r.is_object() && r.value("format", "") == kCostMeasuredFormat,
                  "cost-measured page", concat("a ", kCostMeasuredFormat, " document"),
                  r.is_object() ? r.value("format", "no format") : "not an object");
  std::string body = concat("<h1>Experiment cost-measured</h1><p>",
                            escape(r.at("experiment").at("claim").get<std::string>()), "</p>");
  body += prereg_line(r);
  const json& gate = r.at("gate");
  body +=
      concat("<p class=\"rule\" data-gate=\"", gate.at("passed").get<bool>() ? "passed" : "failed",
             "\">Gate: ", escape(gate.at("name").get<std::string>()), ": measured ",
             thousands(gate.at("measured").get<std::int64_t>()),
             gate.at("judged").get<bool>() ? "" : " (not judged: --quick)", ".</p>");
  body += verdict_boxes(r);
  json tables = json::array();
  for (const auto& [name, rows] : r.at("series").items()) {
    json listed = json::array();
    for (const json& row : rows)
      listed.push_back({row.at("heads").get<std::int64_t>(),
                        thousands(row.at("parameters").get<std::int64_t>()),
                        thousands(row.at("gemm_macs").get<std::int64_t>()),
                        thousands(row.at("attention_macs").get<std::int64_t>()),
                        thousands(row.at("macs").get<std::int64_t>()),
                        thousands(row.at("macs_minus_predicted").get<std::int64_t>()),
                        thousands(row.at("exponentials").get<std::int64_t>()),
                        fixed(1e3 * row.at("median_seconds").get<double>(), 2)});
    tables.push_back({{"title", name},
                      {"columns",
                       {"h", "parameters", "GEMM multiply-adds", "attention multiply-adds",
                        "multiply-adds", "counted - cost model", "exponentials", "median ms"}},
                      {"rows", listed},
                      {"note",
                       "counted by the kernels under a WorkCounting scope; times on one "
                       "thread"}});
  }
  body += tables_html(tables);
  return report::page("headcount experiment cost-measured", kCss, body);
}

}  // namespace headcount::experiments
