// `headcount serve`: the encoder behind an HTTP server (OpenAI's /v1/embeddings, TEI's /embed and
// /tokenize, /v1/models, /health, /metrics), with dynamic batching on one scheduler thread
// (serve/, docs/serve.md). Every option is checked, and the model directory with it, before
// anything binds or loads: a mistake is one line naming the option and value, and exit 2.
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "commands.h"
#include "encoder_cli.h"
#include "headcount/encoder.h"
#include "headcount/error.h"
#include "serve/server.h"

namespace headcount::cli {
namespace {

struct ServeArgs {
  std::string embedding_model, host = "127.0.0.1", api_key, cors_origin;
  int port = 8080, threads = 0;
  std::int64_t max_connections = 128, max_body_bytes = 4 << 20, max_input_tokens = 0,
               max_queue = 256, max_batch_tokens = 8192;
  double timeout_s = 60;
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
  const int threads = resolve_threads(a.threads);

  // The model: --embedding-model, else $HEADCOUNT_MODEL, else the default directory (as embed).
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

  std::string api_key = a.api_key;
  if (api_key.empty())
    if (const char* env = std::getenv("HEADCOUNT_API_KEY"); env != nullptr) api_key = env;

  const std::filesystem::path dir = std::filesystem::path(choice.path).lexically_normal();
  const std::string name =
      (dir.has_filename() ? dir.filename() : dir.parent_path().filename()).string();
  serve::run_server({.model_dir = choice.path,
                     .model_name = name,
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
      "HTTP server: sentence embeddings (OpenAI /v1/embeddings, TEI /embed), batched across "
      "requests, each bitwise `embed`'s (docs/serve.md)");
  cmd->add_option(
      "--embedding-model", a->embedding_model,
      "Encoder directory. Default: $HEADCOUNT_MODEL if set, else " + default_model_dir());
  cmd->add_option("--host", a->host, "Address to listen on (0.0.0.0: every interface)")
      ->capture_default_str();
  cmd->add_option("--port", a->port, "TCP port (0: any free port, printed on stderr)")
      ->capture_default_str();
  cmd->add_option("--threads", a->threads, "Encoder worker threads (0: all cores)")
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
                  "Most tokens per input, [CLS]/[SEP] included (400 past it, or cut with TEI's "
                  "truncate; 0: the model's max_seq_length)")
      ->capture_default_str();
  cmd->add_option("--max-queue", a->max_queue,
                  "Embedding requests waiting at most (503 with Retry-After past it)")
      ->capture_default_str();
  cmd->add_option("--max-batch-tokens", a->max_batch_tokens,
                  "Tokens the scheduler runs per step, across requests")
      ->capture_default_str();
  cmd->add_option("--timeout-s", a->timeout_s, "Seconds a request may take (504 past it)")
      ->capture_default_str();
  cmd->callback([a] { run_serve(*a); });
}

}  // namespace headcount::cli
