// `headcount generate`: text from a Llama-family GGUF decoder (SmolLM2), streamed as it is made,
// and `headcount perplexity`: the model's perplexity on a text file (decoder.h).
//
//   generate [--model FILE.gguf | CHECKPOINT_DIR] --prompt TEXT [--chat] [--max-tokens N]
//   [--temperature T]
//            [--top-p P] [--seed S] [--threads T] [--kv-dtype fp32|bf16|int8]
//            [--weights fp32|bf16|int8|quantized] [--ignore-eos] [--json]
//   perplexity [--model FILE.gguf] TEXT_FILE [--context N] [--weights fp32|bf16|int8|quantized]
//            [--threads T] [--json]
//
// Without --model: $HEADCOUNT_DECODER_MODEL, else models/SmolLM2-135M-Instruct.Q4_1.gguf in the
// source tree (scripts/setup.sh puts it there). Options are checked before the model loads (a
// mistake is one line and exit 2, at once).
// Without --json, generate writes the new text to stdout token by token (a token's bytes as
// they come: a character split over tokens completes with the next one) and one line of
// figures to stderr; with --json one object: {"prompt_tokens": [...], "tokens": [...],
// "text": ..., "prefill_tokens_per_second": ..., "decode_tokens_per_second": ...}.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "commands.h"
#include "decoder_cli.h"
#include "encoder_cli.h"
#include "headcount/bpe.h"
#include "headcount/decoder.h"
#include "headcount/error.h"
#include "headcount/train/definition.h"
#include "headcount/train/trainer.h"
#include "headcount/transformer.h"

namespace headcount::cli {
namespace {

using json = nlohmann::ordered_json;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

struct GenerateArgs {
  std::string model, prompt, kv_dtype = "fp32", weights = "auto";
  bool chat = false, as_json = false, prompt_given = false, ignore_eos = false;
  std::int64_t max_tokens = 128;
  float temperature = 0, top_p = 1;
  std::uint64_t seed = 0;
  int threads = 0;
};

// What generate runs, whatever --model holds: the executor, the prompt as ids, each id's text
// (empty for a control token), the end-of-text id (-1: none), and what the report names.
struct Generation {
  const Transformer* model = nullptr;
  std::vector<std::int32_t> prompt;
  std::function<std::string(std::int32_t)> text_of;
  std::int32_t eos = -1;
  std::string description, weights;
};

// Generates (generate_tokens: the one loop for every model) and reports, streaming each new
// token's text to stdout unless --json; the statistics line goes to stderr.
void generate_and_report(const GenerateArgs& a, Context& ctx, CacheDType kv_dtype,
                         const Generation& g) {
  std::string made;
  GenerateOptions options{.max_tokens = a.max_tokens,
                          .temperature = a.temperature,
                          .top_p = a.top_p,
                          .seed = a.seed,
                          .kv_dtype = kv_dtype,
                          .stop_at_eos = !a.ignore_eos};
  options.on_token = [&](std::int32_t id) {
    const std::string text = g.text_of(id);
    made += text;
    if (!a.as_json && !text.empty()) {
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    }
  };
  const GenerateResult r = generate_tokens(ctx, *g.model, g.prompt, options, g.eos);
  const double prefill_rate = static_cast<double>(r.prompt_tokens) / r.prefill_seconds;
  const double decode_rate =
      r.decode_steps > 0 ? static_cast<double>(r.decode_steps) / r.decode_seconds : 0.0;
  if (a.as_json) {
    std::cout << dump(json{{"model", g.description},
                           {"prompt_tokens", g.prompt},
                           {"tokens", r.tokens},
                           {"text", made},
                           {"prefill_tokens_per_second", prefill_rate},
                           {"decode_tokens_per_second", decode_rate},
                           {"threads", ctx.threads()},
                           {"kv_dtype", a.kv_dtype},
                           {"weights", g.weights},
                           {"kv_cache_bytes", r.cache_bytes}})
              << '\n';
  } else {
    std::printf("\n");
    std::fflush(stdout);  // the text's line ends before the statistics on stderr
    std::fprintf(stderr,
                 "[generate] prompt %lld tokens, prefill %.1f tokens/s; %zu new tokens, decode "
                 "%.1f tokens/s (%d threads, weights %s, KV cache %s)\n",
                 static_cast<long long>(r.prompt_tokens), prefill_rate, r.tokens.size(),
                 decode_rate, ctx.threads(), g.weights.c_str(), a.kv_dtype.c_str());
  }
  std::cout.flush();
  if (!std::cout) fail("stdout", "write failed");
}

// The UTF-8 sequences of `text`, one per code point (a char-lm vocabulary is code points).
std::vector<std::string> code_points(const std::string& text) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    const std::size_t length = lead < 0x80 ? 1 : lead < 0xe0 ? 2 : lead < 0xf0 ? 3 : 4;
    out.push_back(text.substr(i, length));
    i += length;
  }
  return out;
}

void run_generate(const GenerateArgs& a) {
  // 1. Options before the model.
  const std::string path = resolve_decoder_model(a.model, /*checkpoint_allowed=*/true);
  check(a.prompt_given, "--prompt", "a text", "nothing");
  check(a.max_tokens >= 1 && a.max_tokens <= (std::int64_t{1} << 20), "--max-tokens", "1 to 2^20",
        a.max_tokens);
  check(std::isfinite(a.temperature) && a.temperature >= 0, "--temperature",
        "a finite number >= 0 (0: greedy)", a.temperature);
  check(a.top_p > 0 && a.top_p <= 1, "--top-p", "in (0, 1]", a.top_p);
  const CacheDType kv_dtype = parse_kv_dtype(a.kv_dtype);
  if (a.weights != "auto") (void)parse_decoder_weights(a.weights, "--weights");
  Context ctx({.threads = resolve_threads(a.threads)});

  // 2. The model and its tokenizer: a GGUF file (BPE, ChatML) or a checkpoint of a char-lm run
  // (its characters are the vocabulary); both run on the one executor.
  if (!is_checkpoint_dir(path)) {
    const LlamaDecoder decoder = LlamaDecoder::load(path, parse_weights_option(path, a.weights));
    const BpeTokenizer& tokenizer = decoder.tokenizer();
    const std::string text =
        a.chat ? format_chatml({{.role = "user", .content = a.prompt}},
                               {.default_system = std::string(kSmolLM2SystemPrompt)})
               : a.prompt;
    Generation g{.model = &decoder.executor(),
                 .prompt = tokenizer.encode(text),
                 .text_of =
                     [&](std::int32_t id) {
                       return tokenizer.token_type(id) == TokenType::control
                                  ? std::string()
                                  : tokenizer.token_bytes(id);
                     },
                 .eos = tokenizer.eos_id(),
                 .description = detail::concat(
                     "GGUF file (", model::family_name(decoder.config().family), " family)"),
                 .weights = decoder.weights_name()};
    check(!g.prompt.empty(), "--prompt", "text that makes at least one token", "none");
    return generate_and_report(a, ctx, kv_dtype, g);
  }
  check(!a.chat, "--chat", "a ChatML model (a GGUF file)", "a headcount checkpoint");
  check(a.weights == "auto" || a.weights == "fp32" || a.weights == "bf16" || a.weights == "int8",
        "--weights", "auto, fp32, bf16 or int8 for a headcount checkpoint (it has no GGUF blocks)",
        a.weights);
  const std::unique_ptr<train::Trainer> trainer = train::Trainer::resume(ctx, path);
  const nlohmann::json task = trainer->task().describe();
  check(task.contains("characters") && trainer->task().causal(), "--model",
        "a checkpoint of a causal text task (char-lm: its characters are the vocabulary)",
        detail::concat(path, ": task ", task.value("name", std::string("?"))));
  const DType dtype = a.weights == "bf16"   ? DType::bf16
                      : a.weights == "int8" ? DType::i8
                                            : DType::f32;
  const Transformer model(train::to_weights(trainer->model()), dtype);
  const std::vector<std::string> vocabulary = code_points(task.at("characters").get<std::string>());
  Generation g{.model = &model,
               .text_of = [&](std::int32_t id) { return vocabulary[static_cast<std::size_t>(id)]; },
               .description = detail::concat("headcount checkpoint (",
                                             model::family_name(model.config().family),
                                             " family, step ", trainer->step(), ")"),
               .weights = a.weights == "auto" ? "fp32" : a.weights};
  const std::vector<std::string> text = code_points(a.prompt);
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto it = std::find(vocabulary.begin(), vocabulary.end(), text[i]);
    check(it != vocabulary.end(), "--prompt",
          detail::concat("characters of the model's vocabulary (", vocabulary.size(),
                         " characters of its training text)"),
          detail::concat("'", text[i], "' at character ", i));
    g.prompt.push_back(static_cast<std::int32_t>(it - vocabulary.begin()));
  }
  check(!g.prompt.empty(), "--prompt", "at least one character", "none");
  generate_and_report(a, ctx, kv_dtype, g);
}

struct PerplexityArgs {
  std::string model, input, weights = "auto";
  std::int64_t context = 512;
  bool as_json = false;
  int threads = 0;
};

void run_perplexity(const PerplexityArgs& a) {
  const std::string model = resolve_decoder_model(a.model);
  check(a.context >= 4, "--context", ">= 4", a.context);
  if (a.weights != "auto") (void)parse_decoder_weights(a.weights, "--weights");
  std::ifstream file(a.input, std::ios::binary);
  check(static_cast<bool>(file), "TEXT_FILE", "a readable file", a.input);
  std::stringstream text;
  text << file.rdbuf();
  Context ctx({.threads = resolve_threads(a.threads)});
  const LlamaDecoder decoder = LlamaDecoder::load(model, parse_weights_option(model, a.weights));
  check(a.context <= decoder.config().context, "--context",
        detail::concat("at most the model's context ", decoder.config().context), a.context);
  // The text as text: a special token's spelling in it is not that token.
  const std::vector<std::int32_t> ids =
      decoder.tokenizer().encode(text.str(), {.parse_special = false});
  const PerplexityResult r = decoder.perplexity(ctx, ids, a.context);
  if (a.as_json) {
    std::cout << dump(json{{"perplexity", r.perplexity},
                           {"nll", r.nll},
                           {"tokens", ids.size()},
                           {"scored", r.scored},
                           {"windows", r.windows},
                           {"context", a.context},
                           {"seconds", r.seconds},
                           {"threads", ctx.threads()},
                           {"weights", decoder.weights_name()}})
              << '\n';
  } else {
    std::printf("perplexity %.4f (%lld tokens scored in %lld windows of %lld; %.1f s)\n",
                r.perplexity, static_cast<long long>(r.scored), static_cast<long long>(r.windows),
                static_cast<long long>(a.context), r.seconds);
  }
  std::cout.flush();
  if (!std::cout) fail("stdout", "write failed");
}

}  // namespace

void register_generate(CLI::App& app) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "generate", "Generate text with a Llama-family GGUF decoder (SmolLM2), streamed");
  cmd->add_option("--model", a->model, decoder_model_help());
  cmd->add_option("--prompt", a->prompt, "Prompt text")->each([a](const std::string&) {
    a->prompt_given = true;
  });
  cmd->add_flag("--chat", a->chat, "Wrap the prompt in SmolLM2's ChatML template as a user turn");
  cmd->add_option("--max-tokens", a->max_tokens, "New tokens at most")->capture_default_str();
  cmd->add_option("--temperature", a->temperature, "0: greedy; > 0: sampling")
      ->capture_default_str();
  cmd->add_option("--top-p", a->top_p, "Nucleus sampling mass (with --temperature > 0)")
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "Sampler seed")->capture_default_str();
  cmd->add_option("--threads", a->threads, "Worker threads (0: all cores)")->capture_default_str();
  cmd->add_option("--kv-dtype", a->kv_dtype, "KV cache: fp32, bf16 or int8")->capture_default_str();
  cmd->add_option("--weights", a->weights,
                  "Weights as multiplied: auto (quantized for a Q4_1/Q8_0 file, else fp32), fp32 "
                  "(dequantized, the reference), bf16, int8 or quantized (the file's own "
                  "Q4_1/Q8_0 blocks, inputs in int8 blocks of 32)")
      ->capture_default_str();
  cmd->add_flag("--ignore-eos", a->ignore_eos,
                "Go on past the end-of-text token (benchmarks: always --max-tokens tokens)");
  cmd->add_flag("--json", a->as_json, "One JSON object instead of streamed text");
  cmd->callback([a] { run_generate(*a); });
}

void register_perplexity(CLI::App& app) {
  auto a = std::make_shared<PerplexityArgs>();
  CLI::App* cmd = app.add_subcommand(
      "perplexity", "Perplexity of a Llama-family GGUF decoder on a text file (llama.cpp's way)");
  cmd->add_option("--model", a->model, decoder_model_help());
  cmd->add_option("input", a->input, "Text file")->required();
  cmd->add_option("--context", a->context, "Tokens per window (the second half is scored)")
      ->capture_default_str();
  cmd->add_option("--weights", a->weights, "auto, fp32, bf16, int8 or quantized (as for generate)")
      ->capture_default_str();
  cmd->add_option("--threads", a->threads, "Worker threads (0: all cores)")->capture_default_str();
  cmd->add_flag("--json", a->as_json, "One JSON object");
  cmd->callback([a] { run_perplexity(*a); });
}

}  // namespace headcount::cli
