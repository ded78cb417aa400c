#include "bench_encoder.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <vector>

#include "headcount/encoder.h"
#include "headcount/error.h"
#include "headcount/sts.h"

namespace headcount::cli::bench {

void run_encoder_suite(const EncoderSuiteOptions& o) {
  check(o.repeats >= 1, "--repeats", ">= 1", o.repeats);
  const std::string model_dir = o.model_dir.empty() ? default_model_dir() : o.model_dir;
  std::fprintf(stderr, "bench: loading %s\n", model_dir.c_str());
  const BertEncoder encoder = BertEncoder::load(model_dir);
  // The same order as bench/peers/encoder_peers.py: every sentence1, then every sentence2.
  std::vector<std::string> texts;
  const std::vector<StsPair> pairs = read_sts(o.sentences);
  for (const StsPair& p : pairs) texts.push_back(p.sentence1);
  for (const StsPair& p : pairs) texts.push_back(p.sentence2);
  if (o.quick && texts.size() > 64) texts.resize(64);

  Context ctx({.threads = o.threads});
  nlohmann::json rows = nlohmann::json::array();
  if (!o.json)
    std::printf("encoder suite: all-MiniLM-L6-v2, %zu sentences of %s, %d thread%s, median of %d passes\n%6s %12s %14s %12s\n",
                texts.size(), o.sentences.c_str(), o.threads, o.threads == 1 ? "" : "s", o.repeats, "batch",
                "seconds", "sentences/s", "tokens/s");
  for (std::int64_t batch : {1, 32}) {
    std::fprintf(stderr, "bench: encoder batch %lld...\n", static_cast<long long>(batch));
    const EncoderTiming t = time_encoder(ctx, encoder, texts, batch, o.repeats);
    const double tokens_per_second = static_cast<double>(t.tokens) / t.median_seconds;
    rows.push_back({{"suite", "encoder"}, {"kernel", "streaming"}, {"dtype", "f32"}, {"batch", batch},
                    {"threads", o.threads}, {"sentences", t.sentences}, {"tokens", t.tokens},
                    {"seconds", t.median_seconds}, {"sentences_per_second", t.sentences_per_second},
                    {"tokens_per_second", tokens_per_second}});
    if (!o.json)
      std::printf("%6lld %12.3f %14.1f %12.0f\n", static_cast<long long>(batch), t.median_seconds,
                  t.sentences_per_second, tokens_per_second);
  }
  if (o.json) std::printf("%s\n", nlohmann::json{{"suite", "encoder"}, {"rows", rows}}.dump(2).c_str());
}

}  // namespace headcount::cli::bench
