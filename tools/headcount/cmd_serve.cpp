// `headcount serve`: an encoder and/or a decoder behind an HTTP server: OpenAI's /v1/embeddings,
// /v1/completions and /v1/chat/completions (streamed as server-sent events), TEI's /embed,
// /tokenize, /detokenize, /v1/models, /health, /metrics; dynamic batching for embeddings and
// continuous batching for completions, each on one scheduler thread (serve/, docs/serve.md).
// Models: --embedding-model DIR serves an encoder, --model FILE.gguf a decoder; with neither,
// both defaults are served (embed's and generate's). Every option is checked, and the model
// paths with them, before anything binds or loads: a mistake is one line naming the option and
// value, and exit 2.
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "commands.h"
#include "decoder_cli.h"
#include "encoder_cli.h"
#include "headcount/encoder.h"
#include "headcount/error.h"
#include "serve/server.h"

namespace headcount::cli {
namespace {

struct ServeArgs {
  std::string embedding_model, model, weights = "auto", kv_dtype = "fp32", host = "127.0.0.1",
                                      api_key, cors_origin;
  int port = 8080, threads = 0, parallel = 4;
  std::int64_t prefill_chunk = 32, max_connections = 128, max_body_bytes = 4 << 20,
               max_input_tokens = 0, max_queue = 256, max_batch_tokens = 8192;
  double timeout_s = 300;
};

void run_serve(const ServeArgs& a) {
  check(a.port >= 0 && a.port <= 65535, "--port", "0 (any free port) to 65535", a.port);
  check(!a.host.empty(), "--host", "an address to listen on", "nothing");
  check(a.max_connections >= 1 && a.max_connections <= 4096, "--max-connections", "1 to 4096",
        a.max_connections);
  check(a.max_body_bytes >= 1, "--max-body-bytes", ">= 1", a.max_body_bytes);
  check(a.max_queue >= 1, "--max-queue", ">= 1", a.max_queue);
  check(a.max_batch_tokens >= 1, "--max-batch-tokens", ">= 1", a.max_batch_tokens);
  check(a.timeout_s > 0 && a.timeout_s <= 86400, "--timeout-s", "> 0 and <= 86400 seconds",
        a.timeout_s);
  check(a.parallel >= 1 && a.parallel <= 256, "--parallel", "1 to 256", a.parallel);
  check(a.prefill_chunk >= 0, "--prefill-chunk", "0 (whole prompts) or a number of tokens",
        a.prefill_chunk);
  const CacheDType kv_dtype = parse_kv_dtype(a.kv_dtype);
  if (a.weights != "auto") (void)parse_decoder_weights(a.weights, "--weights");
  const int threads = resolve_threads(a.threads);
  // Which models: the ones named, or with neither named both defaults.
  const bool neither = a.embedding_model.empty() && a.model.empty();
  const bool serve_encoder = neither || !a.embedding_model.empty();
  const bool serve_decoder = neither || !a.model.empty();

  // The encoder: --embedding-model, else $HEADCOUNT_MODEL, else the default directory (as embed).
  std::string encoder_dir, encoder_name;
  if (serve_encoder) {
    const ModelChoice choice =
        choose_model(a.embedding_model, "HEADCOUNT_MODEL", default_model_dir());
    const std::string source =
        choice.source == "--model" ? std::string("--embedding-model") : choice.source;
    EncoderConfig config;
    try {
      check_model_dir(choice.path);
      config = read_encoder_config(choice.path);
    } catch (const Error& e) {
      throw Error(detail::concat(e.what(), " (from ", source, ")"));
    }
    const std::int64_t model_max = config.tokenizer.max_length;
    check(a.max_input_tokens == 0 || (a.max_input_tokens >= 2 && a.max_input_tokens <= model_max),
          "--max-input-tokens",
          detail::concat("0 (the model's ", model_max, ") or 2 to ", model_max,
                         " ([CLS] and [SEP] included)"),
          a.max_input_tokens);
    const std::filesystem::path dir = std::filesystem::path(choice.path).lexically_normal();
    encoder_dir = choice.path;
    encoder_name = (dir.has_filename() ? dir.filename() : dir.parent_path().filename()).string();
  }
  check(a.max_input_tokens >= 0, "--max-input-tokens", "0 (the model's limit) or more",
        a.max_input_tokens);
  // The decoder: --model, else $HEADCOUNT_DECODER_MODEL, else the default file (as generate).
  std::string decoder_path, decoder_name;
  if (serve_decoder) {
    decoder_path = resolve_decoder_model(a.model);
    decoder_name = std::filesystem::path(decoder_path).filename().string();
    if (decoder_name.ends_with(".gguf")) decoder_name.resize(decoder_name.size() - 5);
  }

  std::string api_key = a.api_key;
  if (api_key.empty())
    if (const char* env = std::getenv("HEADCOUNT_API_KEY"); env != nullptr) api_key = env;

  serve::run_server({.model_dir = encoder_dir,
                     .model_name = encoder_name,
                     .decoder_path = decoder_path,
                     .decoder_name = decoder_name,
                     .decoder_weights = a.weights,
                     .kv_dtype = kv_dtype,
                     .parallel = a.parallel,
                     .prefill_chunk = a.prefill_chunk,
                     .host = a.host,
                     .port = a.port,
                     .threads = threads,
                     .max_connections = static_cast<std::size_t>(a.max_connections),
                     .api_key = api_key,
                     .cors_origin = a.cors_origin,
                     .max_body_bytes = static_cast<std::size_t>(a.max_body_bytes),
                     .max_input_tokens = a.max_input_tokens,
                     .max_queue = static_cast<std::size_t>(a.max_queue),
                     .max_batch_tokens = a.max_batch_tokens,
                     .timeout_seconds = a.timeout_s});
}

}  // namespace

void register_serve(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand(
      "serve",
      "HTTP server: embeddings (OpenAI /v1/embeddings, TEI /embed) and completions (OpenAI "
      "/v1/completions, /v1/chat/completions, streamed), batched across requests, each bitwise "
      "`embed`'s or `generate`'s (docs/serve.md)");
  cmd->add_option("--embedding-model", a->embedding_model,
                  "Encoder directory. Default: with no --model, $HEADCOUNT_MODEL if set, else " +
                      default_model_dir());
  cmd->add_option("--model", a->model,
                  "Decoder GGUF file (completions, chat). Default: with no --embedding-model, "
                  "$HEADCOUNT_DECODER_MODEL if set, else " +
                      default_decoder_model());
  cmd->add_option("--weights", a->weights,
                  "Decoder weights, as generate's: auto (the file's own blocks when quantized), "
                  "fp32, bf16, int8, quantized")
      ->capture_default_str();
  cmd->add_option("--kv-dtype", a->kv_dtype, "Decoder KV cache: fp32, bf16 or int8")
      ->capture_default_str();
  cmd->add_option("--parallel", a->parallel,
                  "Completion requests decoding at once (continuous batching slots)")
      ->capture_default_str();
  cmd->add_option("--prefill-chunk", a->prefill_chunk,
                  "Prompt tokens prefilled between two decode steps while other requests decode "
                  "(bitwise the whole prompt's prefill; 0: whole prompts)")
      ->capture_default_str();
  cmd->add_option("--host", a->host, "Address to listen on (0.0.0.0: every interface)")
      ->capture_default_str();
  cmd->add_option("--port", a->port, "TCP port (0: any free port, printed on stderr)")
      ->capture_default_str();
  cmd->add_option("--threads", a->threads, "Model worker threads (0: all cores)")
      ->capture_default_str();
  cmd->add_option("--max-connections", a->max_connections,
                  "Connections served at once (HTTP threads; more wait to be accepted)")
      ->capture_default_str();
  cmd->add_option("--api-key", a->api_key,
                  "Require Authorization: Bearer KEY on every route but /health (default: "
                  "$HEADCOUNT_API_KEY if set, else no key)");
  cmd->add_option("--cors-origin", a->cors_origin,
                  "Send Access-Control-Allow-Origin for this origin (default: no CORS headers)");
  cmd->add_option("--max-body-bytes", a->max_body_bytes, "Largest request body (413 past it)")
      ->capture_default_str();
  cmd->add_option("--max-input-tokens", a->max_input_tokens,
                  "Most tokens per input, [CLS]/[SEP] included, or per prompt (400 past it, or "
                  "cut with TEI's truncate; 0: the encoder's max_seq_length, the decoder's "
                  "context - 1)")
      ->capture_default_str();
  cmd->add_option("--max-queue", a->max_queue,
                  "Requests waiting at most, per model (503 with Retry-After past it)")
      ->capture_default_str();
  cmd->add_option("--max-batch-tokens", a->max_batch_tokens,
                  "Tokens the scheduler runs per step, across requests")
      ->capture_default_str();
  cmd->add_option("--timeout-s", a->timeout_s, "Seconds a request may take (504 past it)")
      ->capture_default_str();
  cmd->callback([a] { run_serve(*a); });
}

}  // namespace headcount::cli
