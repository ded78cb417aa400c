#include "headcount/sts.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <numeric>
#include <string_view>

#include "headcount/error.h"

namespace headcount {

using detail::concat;

std::vector<StsPair> read_sts(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open");
  std::vector<StsPair> pairs;
  std::string line;
  std::int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    std::vector<std::string_view> fields;
    std::string_view rest = line;
    while (fields.size() < 7) {
      const std::size_t tab = rest.find('\t');
      fields.push_back(rest.substr(0, tab));
      if (tab == std::string_view::npos) break;
      rest.remove_prefix(tab + 1);
    }
    check(fields.size() >= 7, concat(path, ":", number),
          "7 TAB-separated fields (genre, file, year, id, score, sentence1, sentence2)",
          concat(fields.size(), " fields"));
    StsPair pair;
    const std::string_view score = fields[4];
    auto [end, ec] = std::from_chars(score.data(), score.data() + score.size(), pair.score);
    check(ec == std::errc() && end == score.data() + score.size() && std::isfinite(pair.score),
          concat(path, ":", number, ": score (field 5)"), "a number", concat('"', score, '"'));
    pair.sentence1 = fields[5];
    pair.sentence2 = fields[6];
    pairs.push_back(std::move(pair));
  }
  check(!pairs.empty(), path, "at least one sentence pair",
        number == 0 ? "an empty file" : "only empty lines");
  return pairs;
}

double pearson(const std::vector<double>& x, const std::vector<double>& y) {
  const std::size_t n = std::min(x.size(), y.size());
  if (n < 2) return std::numeric_limits<double>::quiet_NaN();
  const double mx = std::accumulate(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n), 0.0) /
                    static_cast<double>(n);
  const double my = std::accumulate(y.begin(), y.begin() + static_cast<std::ptrdiff_t>(n), 0.0) /
                    static_cast<double>(n);
  double sxy = 0, sxx = 0, syy = 0;
  for (std::size_t i = 0; i < n; ++i) {
    sxy += (x[i] - mx) * (y[i] - my);
    sxx += (x[i] - mx) * (x[i] - mx);
    syy += (y[i] - my) * (y[i] - my);
  }
  if (sxx == 0 || syy == 0) return std::numeric_limits<double>::quiet_NaN();
  return sxy / std::sqrt(sxx * syy);
}

namespace {
// Ranks from 1, ties sharing the average of the ranks they span (as scipy.stats.rankdata).
std::vector<double> average_ranks(const std::vector<double>& v) {
  std::vector<std::size_t> order(v.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return v[a] < v[b]; });
  std::vector<double> ranks(v.size());
  for (std::size_t i = 0; i < order.size();) {
    std::size_t j = i;
    while (j + 1 < order.size() && v[order[j + 1]] == v[order[i]]) ++j;
    const double rank = (static_cast<double>(i) + static_cast<double>(j)) / 2.0 + 1.0;
    for (std::size_t k = i; k <= j; ++k) ranks[order[k]] = rank;
    i = j + 1;
  }
  return ranks;
}
}  // namespace

double spearman(const std::vector<double>& x, const std::vector<double>& y) {
  return pearson(average_ranks(x), average_ranks(y));
}

StsResult evaluate_sts(Context& ctx, const BertEncoder& encoder, const std::vector<StsPair>& pairs,
                       const EmbedOptions& options) {
  check(!pairs.empty(), "pairs", "at least one", "none");
  std::vector<std::string> texts;
  texts.reserve(2 * pairs.size());
  for (const StsPair& p : pairs) texts.push_back(p.sentence1);
  for (const StsPair& p : pairs) texts.push_back(p.sentence2);
  EmbedOptions embed_options = options;
  embed_options.normalize = true;
  const Tensor embeddings = encoder.embed(ctx, texts, embed_options);
  const std::int64_t d = encoder.dim(), n = static_cast<std::int64_t>(pairs.size());
  StsResult result;
  result.pairs = n;
  std::vector<double> gold;
  for (std::int64_t i = 0; i < n; ++i) {
    result.cosines.push_back(cosine_similarity(embeddings.data<const float>() + i * d,
                                               embeddings.data<const float>() + (n + i) * d, d));
    gold.push_back(pairs[static_cast<std::size_t>(i)].score);
  }
  result.spearman = 100.0 * spearman(result.cosines, gold);
  result.pearson = 100.0 * pearson(result.cosines, gold);
  return result;
}

}  // namespace headcount
