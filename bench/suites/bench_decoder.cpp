// `headcount bench --suite decoder` (bench_decoder.h): for each weights dtype, the decoder is
// loaded (not timed), warmed up by one run, then `repeats` runs of: a fresh KV cache, the prompt in
// one forward (prefill: streaming kernel, causal) and the greedy choice, then new tokens fed back
// one at a time (decode kernel) with their greedy choices. Medians of prefill and decode tokens/s
// (bench/decoder_tokens.sh measures the same through `headcount generate --json`, one process per
// run; bench/peers/llama_cpp_peer.py measures llama.cpp the same way). Then batched decoding: 4
// sequences advancing together (Transformer::decode) against one stream, both in the same run.
#include "bench_decoder.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "headcount/decoder.h"
#include "headcount/error.h"
#include "headcount/gguf.h"
#include "headcount/transformer.h"
#include "layers/packed_gemm.h"
#include "simd/qblock.h"

namespace headcount::cli::bench {
namespace {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

void run_decoder_suite(const DecoderSuiteOptions& o) {
  check(o.repeats >= 1, "--repeats", ">= 1", o.repeats);
  std::ifstream file(o.text, std::ios::binary);
  check(static_cast<bool>(file), "decoder suite text", "a readable file", o.text);
  std::string text(2060, '\0');
  file.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<std::size_t>(file.gcount()));
  const std::int64_t new_tokens = o.quick ? 16 : 128;
  (void)llama_config(GgufFile::open(o.model));  // a wrong file: one error line, before any output

  Context ctx({.threads = o.threads});
  nlohmann::json rows = nlohmann::json::array();
  if (!o.json)
    std::printf("decoder suite: %s, %d thread%s, median of %d runs\n%-9s %8s %8s %16s %16s  %s\n",
                o.model.c_str(), o.threads, o.threads == 1 ? "" : "s", o.repeats, "weights",
                "prompt", "new", "prefill tok/s", "decode tok/s",
                "GEMM micro-kernel (prefill / decode)");
  for (const char* name : {"fp32", "bf16", "int8", "quantized"}) {
    std::fprintf(stderr, "bench: loading %s (%s weights)\n", o.model.c_str(), name);
    const LlamaDecoder decoder = LlamaDecoder::load(o.model, parse_decoder_weights(name));
    std::vector<std::int32_t> prompt = decoder.tokenizer().encode(text);
    if (o.quick && prompt.size() > 64) prompt.resize(64);
    const auto n = static_cast<std::int64_t>(prompt.size());
    std::vector<double> prefill, decode;
    // The greedy choice from row `row` of a logits tensor [rows, vocab].
    const std::int64_t vocab = decoder.config().vocab;
    auto argmax_of = [vocab](const Tensor& logits, std::int64_t row = 0) {
      return sample_token(
          {logits.data<const float>() + row * vocab, static_cast<std::size_t>(vocab)}, 0, 1, 0);
    };
    for (int run = 0; run <= o.repeats; ++run) {  // run 0 warms up
      KvCache cache = decoder.make_cache(n + new_tokens - 1);
      using clock = std::chrono::steady_clock;
      const auto t0 = clock::now();
      std::int32_t token = argmax_of(decoder.executor().forward(ctx, prompt, cache));
      const auto t1 = clock::now();
      for (std::int64_t i = 1; i < new_tokens; ++i)
        token = argmax_of(
            decoder.executor().forward(ctx, std::span<const std::int32_t>(&token, 1), cache));
      const auto t2 = clock::now();
      if (run == 0) continue;
      prefill.push_back(static_cast<double>(n) / std::chrono::duration<double>(t1 - t0).count());
      decode.push_back(static_cast<double>(new_tokens - 1) /
                       std::chrono::duration<double>(t2 - t1).count());
    }
    // Batched decoding (Transformer::decode): 4 prompts of 32 tokens (consecutive slices of the
    // text), each prefilled into its own cache (not timed), then new_tokens - 1 steps in which
    // all 4 advance by one greedy token in one pass over the weights; against the first prompt
    // decoded alone the same way, in the same run. Decode phase only.
    constexpr std::int64_t kSequences = 4, kPromptTokens = 32;
    std::vector<double> alone, together;
    if (n >= kSequences * kPromptTokens) {
      const Transformer& model = decoder.executor();
      auto step_all = [&](std::int64_t sequences) {
        std::vector<KvCache> caches;
        std::vector<std::int32_t> next;
        for (std::int64_t s = 0; s < sequences; ++s) {
          caches.push_back(model.make_cache(kPromptTokens + new_tokens - 1));
          next.push_back(argmax_of(
              model.forward(ctx,
                            std::span<const std::int32_t>(prompt).subspan(
                                static_cast<std::size_t>(s * kPromptTokens), kPromptTokens),
                            caches.back())));
        }
        std::vector<KvCache*> pointers;
        for (KvCache& c : caches) pointers.push_back(&c);
        const auto t0 = std::chrono::steady_clock::now();
        for (std::int64_t i = 1; i < new_tokens; ++i) {
          const Tensor logits = sequences == 1 ? model.forward(ctx, next, caches[0])
                                               : model.decode(ctx, next, pointers);
          for (std::int64_t s = 0; s < sequences; ++s)
            next[static_cast<std::size_t>(s)] = argmax_of(logits, s);
        }
        return static_cast<double>(sequences * (new_tokens - 1)) /
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      };
      for (int run = 0; run <= o.repeats; ++run) {  // run 0 warms up
        const double one = step_all(1), four = step_all(kSequences);
        if (run == 0) continue;
        alone.push_back(one);
        together.push_back(four);
      }
    }
    // The projections' micro-kernel (k = d_model) for the prompt's rows and for one new token.
    const auto kernel = [&](std::int64_t m) -> std::string {
      const std::string w = name;
      if (w == "quantized")
        return detail::concat("GGUF blocks (", isa_name(simd::qblock_kernels(ctx.isa()).isa), ")");
      const DType dtype = w == "bf16" ? DType::bf16 : w == "int8" ? DType::i8 : DType::f32;
      return layers::packed_gemm_kernel(ctx.isa(), dtype, decoder.config().d_model, m);
    };
    const std::string prefill_kernel = kernel(n), decode_kernel = kernel(1);
    rows.push_back({{"suite", "decoder"},
                    {"weights", name},
                    {"gemm_kernel_prefill", prefill_kernel},
                    {"gemm_kernel_decode", decode_kernel},
                    {"threads", o.threads},
                    {"prompt_tokens", n},
                    {"new_tokens", new_tokens},
                    {"prefill_tokens_per_second", median(prefill)},
                    {"decode_tokens_per_second", median(decode)},
                    {"prefill_runs", prefill},
                    {"decode_runs", decode}});
    if (!o.json)
      std::printf("%-9s %8lld %8lld %16.1f %16.1f  %s / %s\n", name, static_cast<long long>(n),
                  static_cast<long long>(new_tokens), median(prefill), median(decode),
                  prefill_kernel.c_str(), decode_kernel.c_str());
    if (!together.empty()) {
      // Per round, the batch's aggregate rate over the one stream's.
      std::vector<double> ratio;
      for (std::size_t r = 0; r < together.size(); ++r) ratio.push_back(together[r] / alone[r]);
      rows.push_back({{"suite", "decoder"},
                      {"weights", name},
                      {"sequences", kSequences},
                      {"threads", o.threads},
                      {"prompt_tokens", kPromptTokens},
                      {"new_tokens", new_tokens},
                      {"one_stream_decode_tokens_per_second", median(alone)},
                      {"batched_decode_tokens_per_second", median(together)},
                      {"batched_over_one_stream", median(ratio)},
                      {"batched_runs", together}});
      if (!o.json)
        std::printf(
            "%-9s %8lld %8lld %16s %16.1f  batched decode, %lld sequences: %.2fx one "
            "stream (%.1f tok/s)\n",
            name, static_cast<long long>(kPromptTokens), static_cast<long long>(new_tokens), "",
            median(together), static_cast<long long>(kSequences), median(ratio), median(alone));
    }
  }
  if (o.json)
    std::printf("%s\n", nlohmann::json{{"suite", "decoder"}, {"rows", rows}}.dump(2).c_str());
}

}  // namespace headcount::cli::bench
