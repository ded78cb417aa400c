// time_encoder: the headcount side of the encoder benchmark (peers: bench/peers/encoder_peers.py).
#include <algorithm>
#include <chrono>

#include "headcount/encoder.h"
#include "headcount/error.h"

namespace headcount {

EncoderTiming time_encoder(Context& ctx, const BertEncoder& encoder,
                           const std::vector<std::string>& texts, std::int64_t batch_size,
                           int repeats, Kernel kernel) {
  check(repeats >= 1, "repeats", ">= 1", repeats);
  EncoderTiming timing;
  timing.sentences = static_cast<std::int64_t>(texts.size());
  timing.batch_size = batch_size;
  timing.threads = ctx.threads();
  for (const std::string& text : texts)
    timing.tokens += static_cast<std::int64_t>(encoder.tokenizer().encode(text).size());
  const EmbedOptions options{.batch_size = batch_size, .kernel = kernel};
  encoder.embed(ctx, texts, options);  // warm-up: scratch, workspaces and BLAS buffers touched once
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    encoder.embed(ctx, texts, options);
    timing.seconds.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::vector<double> sorted = timing.seconds;
  std::sort(sorted.begin(), sorted.end());
  timing.median_seconds = sorted[sorted.size() / 2];
  timing.sentences_per_second = static_cast<double>(timing.sentences) / timing.median_seconds;
  return timing;
}

}  // namespace headcount
