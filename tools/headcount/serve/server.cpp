#include "server.h"

#include <fcntl.h>
#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include "api_error.h"
#include "completion_routes.h"
#include "decoder_scheduler.h"
#include "embedding_routes.h"
#include "headcount/decoder.h"
#include "headcount/encoder.h"
#include "headcount/error.h"
#include "headcount/gguf.h"
#include "metrics.h"
#include "page.h"
#include "scheduler.h"

namespace headcount::serve {
namespace {

using httplib::Request;
using httplib::Response;
using HandlerResponse = httplib::Server::HandlerResponse;

// When the request on this HTTP thread was routed (set before the body is read), for its
// deadline and the latency histogram. httplib runs one request at a time per thread.
thread_local std::optional<Clock::time_point> request_start;

void reply(Response& res, int status, std::string body, const char* type = "application/json") {
  res.status = status;
  res.set_content(std::move(body), type);
}

void reply_error(Response& res, const ApiError& error) {
  // 503 means "try again": the queue drains, the model finishes loading.
  if (error.status() == 503) res.set_header("Retry-After", "1");
  if (error.status() == 401) res.set_header("WWW-Authenticate", "Bearer");
  reply(res, error.status(), error.body());
}

// Runs a route's body; an ApiError becomes its error object, anything else a 500.
template <typename F>
void guarded(Response& res, F&& route) {
  try {
    route();
  } catch (const ApiError& e) {
    reply_error(res, e);
  } catch (const std::exception& e) {
    reply_error(res, ApiError(500, std::string("internal error: ") + e.what(), "server_error"));
  }
}

// The models' parts, made by the loader thread; `ready` publishes them to the HTTP threads.
struct Model {
  std::unique_ptr<BertEncoder> encoder;
  std::unique_ptr<EmbeddingScheduler> scheduler;
  std::unique_ptr<EmbeddingRoutes> routes;
  std::unique_ptr<LlamaDecoder> decoder;
  std::unique_ptr<DecoderScheduler> decoder_scheduler;
  std::unique_ptr<CompletionRoutes> completions;
  std::atomic<bool> ready{false};
  std::atomic<bool> failed{false};
  std::string error;  // written before `failed` is set
  std::string failed_option;

  void check_ready() const {
    if (!ready.load(std::memory_order_acquire))
      throw ApiError(503, "the model is still loading (GET /health says when it is ready)",
                     "server_error", "", "model_loading");
  }
  const EmbeddingRoutes& routes_or_503() const {
    check_ready();
    if (!routes)
      throw ApiError(404, "this server has no embedding model (serve --embedding-model DIR)",
                     "invalid_request_error", "model", "model_not_found");
    return *routes;
  }
  const CompletionRoutes& completions_or_503() const {
    check_ready();
    if (!completions)
      throw ApiError(404, "this server has no decoder (serve --model FILE.gguf)",
                     "invalid_request_error", "model", "model_not_found");
    return *completions;
  }
  std::string models() const {
    check_ready();
    std::string out = "{\"object\":\"list\",\"data\":[";
    // "kind" (not OpenAI's) tells a client, and the page at /, which routes take the model.
    const std::pair<const std::string*, const char*> served[] = {
        {routes ? &routes->name() : nullptr, "embedding"},
        {completions ? &completions->name() : nullptr, "completion"}};
    for (const auto& [name, kind] : served) {
      if (name == nullptr) continue;
      if (out.back() == '}') out += ',';
      out += "{\"id\":" + json_string(*name) +
             ",\"object\":\"model\",\"created\":0,\"owned_by\":\"headcount\",\"kind\":\"" + kind +
             "\"}";
    }
    return out + "]}";
  }
};

// Whether a GGUF file's chat template is ChatML (what format_chatml renders), and the system
// turn it puts first when a conversation has none (SmolLM2's; "" when it names none).
struct ChatTemplate {
  bool present = false;  // the file has tokenizer.chat_template
  bool chatml = false;
  std::string default_system;
};
ChatTemplate read_chat_template(const std::string& gguf_path) {
  const GgufFile file = GgufFile::open(gguf_path);
  const GgufValue* value = file.find("tokenizer.chat_template");
  if (value == nullptr) return {};
  const std::string& text = value->text;
  ChatTemplate t{.present = true,
                 .chatml = text.find("<|im_start|>") != std::string::npos &&
                           text.find("<|im_end|>") != std::string::npos};
  if (text.find(kSmolLM2SystemPrompt) != std::string::npos)
    t.default_system = std::string(kSmolLM2SystemPrompt);
  return t;
}

// Streams a completion's server-sent events from its HTTP thread; a write that fails (the
// client left) cancels it, so its slot is freed at the scheduler's next step.
void stream_events(Response& res, std::shared_ptr<Completion> completion) {
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [completion](std::size_t, httplib::DataSink& sink) {
        bool ended = false;
        const std::string events = completion->next_events(std::chrono::milliseconds(100), ended);
        if (!events.empty() && !sink.write(events.data(), events.size())) {
          completion->cancel();
          return false;
        }
        if (ended) {
          sink.done();
          return true;
        }
        if (!sink.is_writable()) {
          completion->cancel();
          return false;
        }
        return true;
      },
      [completion](bool success) {
        if (!success) completion->cancel();
      });
}

// The write end of the pipe the handler writes to (one server per process).
std::atomic<int> stop_pipe_write{-1};

extern "C" void on_stop_signal(int sig) {
  const int fd = stop_pipe_write.load();
  const unsigned char byte = static_cast<unsigned char>(sig);
  if (fd >= 0) (void)!::write(fd, &byte, 1);  // async-signal-safe; a full pipe drops a repeat
}

// Installs on_stop_signal for SIGTERM and SIGINT while it lives; wait() returns a signal's
// number, or 0 after `ms` milliseconds without one.
class StopSignals {
 public:
  StopSignals() {
    if (::pipe2(fds_, O_CLOEXEC | O_NONBLOCK) != 0) fail("serve", "cannot create a pipe");
    stop_pipe_write.store(fds_[1]);
    struct sigaction action {};
    action.sa_handler = on_stop_signal;
    action.sa_flags = SA_RESTART;
    sigemptyset(&action.sa_mask);
    ::sigaction(SIGTERM, &action, &old_term_);
    ::sigaction(SIGINT, &action, &old_int_);
  }
  ~StopSignals() {
    ::sigaction(SIGTERM, &old_term_, nullptr);
    ::sigaction(SIGINT, &old_int_, nullptr);
    stop_pipe_write.store(-1);
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  int wait(int ms) const {
    pollfd p{.fd = fds_[0], .events = POLLIN, .revents = 0};
    if (::poll(&p, 1, ms) <= 0) return 0;
    unsigned char byte = 0;
    return ::read(fds_[0], &byte, 1) == 1 ? byte : 0;
  }

 private:
  int fds_[2] = {-1, -1};
  struct sigaction old_term_ {};
  struct sigaction old_int_ {};
};

}  // namespace

bool constant_time_equals(const std::string& given, const std::string& secret) {
  // Every byte of the secret is compared, whatever the given key's length or content; the
  // length difference is folded in without an early exit.
  volatile unsigned char diff = given.size() == secret.size() ? 0 : 1;
  for (std::size_t i = 0; i < secret.size(); ++i) {
    const unsigned char g = i < given.size() ? static_cast<unsigned char>(given[i]) : 0;
    diff = diff | (g ^ static_cast<unsigned char>(secret[i]));
  }
  return diff == 0;
}

void run_server(const ServeOptions& o) {
  // SIGTERM and SIGINT: the handler only writes the signal's number to a pipe, and the signal
  // thread below does the rest. (Blocking them and waiting in sigtimedwait would not do: the CLI
  // links OpenBLAS, whose threads start before main and would take the signal's default action,
  // ending the process.) A client that vanishes must not kill the server with SIGPIPE.
  StopSignals stop_signals;
  std::signal(SIGPIPE, SIG_IGN);

  Metrics metrics;
  Model model;
  httplib::Server server;
  // httplib's default pool is 8 threads: each open connection (keep-alive included) holds one,
  // so the pool is --max-connections wide. The body cap is set explicitly (httplib's default is
  // unlimited); past it httplib answers 413 before the handler runs.
  server.new_task_queue = [n = o.max_connections] { return new httplib::ThreadPool(n); };
  server.set_payload_max_length(o.max_body_bytes);
  server.set_keep_alive_timeout(5);
  // A response goes out in several writes (headers, body; a stream's events one by one): with
  // Nagle's algorithm on, each write after the first waits for the client's delayed ACK (40 ms
  // on Linux), which was most of an embedding request's latency at concurrency 16.
  server.set_tcp_nodelay(true);
  // SO_REUSEADDR only: httplib's default also sets SO_REUSEPORT, with which a second server
  // started on the same port binds too and silently takes half the connections. A busy port
  // must be an error.
  // The listening socket is remembered to raise its backlog after httplib's listen() (below).
  socket_t listening = INVALID_SOCKET;
  server.set_socket_options([&listening](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listening = sock;
  });
  // httplib 0.11's defaults close a keep-alive connection after 5 requests, so a client holding
  // one connection reconnects every 5 requests; with the listen backlog of 5 (compiled into the
  // library) 64 clients reconnecting at once overflowed the accept queue and got resets
  // (bench/serve_peers.py at concurrency 64). A connection now lives until its keep-alive timeout.
  server.set_keep_alive_max_count(std::numeric_limits<int>::max());
  const auto timeout =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.timeout_seconds));

  if (!o.cors_origin.empty())
    server.set_default_headers(
        {{"Access-Control-Allow-Origin", o.cors_origin}, {"Vary", "Origin"}});

  server.set_pre_routing_handler([&](const Request& req, Response& res) {
    request_start = Clock::now();
    if (req.method == "OPTIONS" && !o.cors_origin.empty()) {  // a browser's preflight
      res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
      res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
      res.set_header("Access-Control-Max-Age", "600");
      res.status = 204;
      return HandlerResponse::Handled;
    }
    return HandlerResponse::Unhandled;
  });

  // Answers httplib made itself (404 for an unknown route, 413 past the body cap, 400 for a
  // malformed request line) get an error object too; routes' own errors already have one.
  server.set_error_handler(
      httplib::Server::HandlerWithResponse([&](const Request& req, Response& res) {
        if (!res.body.empty()) return HandlerResponse::Unhandled;
        if (res.status == 404)
          reply_error(res, ApiError(404, "no route " + req.method + " " + req.path,
                                    "invalid_request_error", "", "not_found"));
        else if (res.status == 413)
          reply_error(res, ApiError(413,
                                    "body: expected at most " + std::to_string(o.max_body_bytes) +
                                        " bytes (--max-body-bytes), got more",
                                    "invalid_request_error", "body", "payload_too_large"));
        else
          reply_error(res, ApiError(res.status, "the request could not be read",
                                    "invalid_request_error", "", ""));
        return HandlerResponse::Handled;
      }));
  server.set_exception_handler([](const Request&, Response& res, std::exception_ptr) {
    reply_error(res, ApiError(500, "internal error", "server_error"));
  });
  server.set_logger([&](const Request& req, const Response& res) {
    const double seconds =
        request_start ? std::chrono::duration<double>(Clock::now() - *request_start).count() : -1;
    request_start.reset();
    metrics.record_request(req.path, res.status, seconds);
  });

  auto deadline = [&] { return request_start.value_or(Clock::now()) + timeout; };
  // The API key is checked in each route, after httplib has read the body (at most
  // --max-body-bytes): answering before would leave the body unread on a keep-alive connection,
  // where it would be taken for the next request.
  auto authorize = [&](const Request& req) {
    if (o.api_key.empty()) return;
    const std::string auth = req.get_header_value("Authorization");
    const std::string prefix = "Bearer ";
    if (!auth.starts_with(prefix) || !constant_time_equals(auth.substr(prefix.size()), o.api_key))
      throw ApiError(401,
                     auth.empty() ? "no API key: send Authorization: Bearer <key>"
                                  : "Authorization: the API key is not valid",
                     "authentication_error", "", "invalid_api_key");
  };

  // The page needs no key (it holds no data); the requests it sends carry the key typed into it.
  server.Get("/", [&](const Request&, Response& res) {
    res.set_header("Cache-Control", "no-cache");
    reply(res, 200, index_page(), "text/html; charset=utf-8");
  });
  server.Get("/health", [&](const Request&, Response& res) {
    if (model.ready.load(std::memory_order_acquire))
      reply(res, 200, R"({"status":"ok"})");
    else
      reply(res, 503, model.failed.load() ? R"({"status":"failed"})" : R"({"status":"loading"})");
  });
  server.Get("/metrics", [&](const Request& req, Response& res) {
    guarded(res, [&] {
      authorize(req);
      reply(res, 200, metrics.render(), "text/plain; version=0.0.4; charset=utf-8");
    });
  });
  server.Get("/v1/models", [&](const Request& req, Response& res) {
    guarded(res, [&] {
      authorize(req);
      reply(res, 200, model.models());
    });
  });
  for (const bool chat : {false, true})
    server.Post(chat ? "/v1/chat/completions" : "/v1/completions",
                [&, chat](const Request& req, Response& res) {
                  guarded(res, [&] {
                    authorize(req);
                    std::shared_ptr<Completion> completion =
                        model.completions_or_503().start(req.body, chat, deadline());
                    if (completion->streaming())
                      stream_events(res, std::move(completion));
                    else
                      reply(res, 200, completion->wait_for_body());
                  });
                });
  server.Post("/detokenize", [&](const Request& req, Response& res) {
    guarded(res, [&] {
      authorize(req);
      reply(res, 200, model.completions_or_503().detokenize(req.body));
    });
  });
  server.Post("/v1/embeddings", [&](const Request& req, Response& res) {
    guarded(res, [&] {
      authorize(req);
      reply(res, 200, model.routes_or_503().openai_embeddings(req.body, deadline()));
    });
  });
  server.Post("/embed", [&](const Request& req, Response& res) {
    guarded(res, [&] {
      authorize(req);
      reply(res, 200, model.routes_or_503().tei_embed(req.body, deadline()));
    });
  });
  server.Post("/tokenize", [&](const Request& req, Response& res) {
    guarded(res, [&] {
      authorize(req);
      // {"content": ...} is llama.cpp's shape (the decoder's BPE), {"inputs": ...} TEI's (the
      // encoder's WordPiece); with one model served, its own shape's errors name the fields.
      model.check_ready();
      const bool decoder =
          model.completions && (!model.routes || is_decoder_tokenize_request(req.body));
      reply(res, 200,
            decoder ? model.completions->tokenize(req.body)
                    : model.routes_or_503().tokenize(req.body));
    });
  });

  // 0. The decoder's file is a GGUF file whose chat template, if it has one, is ChatML (what
  // /v1/chat/completions renders): refused before anything binds or loads.
  ChatTemplate chat;
  if (!o.decoder_path.empty()) {
    try {
      chat = read_chat_template(o.decoder_path);
    } catch (const Error& e) {
      fail("--model", e.what());
    }
    if (chat.present && !chat.chatml)
      fail("--model", o.decoder_path +
                          ": tokenizer.chat_template is not ChatML (<|im_start|> ... <|im_end|>); "
                          "headcount serve renders chats in ChatML only");
  }

  // 1. Bind: a busy port or a bad address is the user's to fix (exit 2).
  int port = o.port;
  if (port == 0) {
    port = server.bind_to_any_port(o.host);
    if (port < 0) fail("--host", detail::concat("cannot listen on ", o.host, " (any port)"));
  } else if (!server.bind_to_port(o.host, port)) {
    fail("--host/--port",
         detail::concat("cannot listen on ", o.host, ":", port, " (address in use or not local)"));
  }
  // listen() again on a listening socket sets its backlog (Linux): --max-connections at least,
  // so a burst of that many clients connecting at once waits to be accepted instead of being
  // refused.
  if (listening != INVALID_SOCKET)
    ::listen(listening, static_cast<int>(std::max<std::size_t>(o.max_connections, 128)));
  const std::string names = o.model_name.empty()     ? o.decoder_name
                            : o.decoder_name.empty() ? o.model_name
                                                     : o.model_name + " and " + o.decoder_name;
  std::fprintf(stderr, "headcount serve: listening on http://%s:%d (model %s loading)\n",
               o.host.c_str(), port, names.c_str());

  // 2. Load while already answering /health.
  std::atomic<bool> stop_requested{false}, listening_done{false};
  std::thread loader([&] {
    const char* option = "--embedding-model";
    try {
      const auto start = Clock::now();
      if (!o.model_dir.empty()) {
        model.encoder = std::make_unique<BertEncoder>(BertEncoder::load(o.model_dir));
        model.scheduler = std::make_unique<EmbeddingScheduler>(
            *model.encoder,
            SchedulerOptions{.threads = o.threads,
                             .max_batch_tokens = o.max_batch_tokens,
                             .max_queue = o.max_queue},
            metrics);
        const std::int64_t cap = o.max_input_tokens > 0
                                     ? o.max_input_tokens
                                     : model.encoder->tokenizer().options().max_length;
        model.routes =
            std::make_unique<EmbeddingRoutes>(*model.encoder, *model.scheduler, o.model_name, cap);
      }
      option = "--model";
      if (!o.decoder_path.empty()) {
        const std::string weights =
            o.decoder_weights == "auto" ? auto_decoder_weights(o.decoder_path) : o.decoder_weights;
        model.decoder = std::make_unique<LlamaDecoder>(
            LlamaDecoder::load(o.decoder_path, parse_decoder_weights(weights, "--weights")));
        model.decoder_scheduler = std::make_unique<DecoderScheduler>(
            model.decoder->executor(),
            DecoderSchedulerOptions{.threads = o.threads,
                                    .parallel = o.parallel,
                                    .max_queue = o.max_queue,
                                    .kv_dtype = o.kv_dtype,
                                    .eos = model.decoder->tokenizer().eos_id(),
                                    .prefill_chunk = o.prefill_chunk},
            metrics);
        const std::int64_t context = model.decoder->config().context;
        model.completions = std::make_unique<CompletionRoutes>(
            *model.decoder, *model.decoder_scheduler, o.decoder_name,
            o.max_input_tokens > 0 ? std::min(o.max_input_tokens, context - 1) : context - 1,
            chat.chatml, chat.default_system);
      }
      model.ready.store(true, std::memory_order_release);
      std::fprintf(stderr, "headcount serve: model %s ready in %.2f s (%d threads)\n",
                   names.c_str(), std::chrono::duration<double>(Clock::now() - start).count(),
                   o.threads);
    } catch (const std::exception& e) {
      model.error = e.what();
      model.failed_option = option;
      model.failed.store(true);
      stop_requested.store(true);
    }
  });

  // 3. The signal thread: on SIGTERM/SIGINT (or a failed load) it stops the listener.
  std::thread signals([&] {
    while (!listening_done.load()) {
      const int sig = stop_signals.wait(100);
      if (sig <= 0 && !stop_requested.load()) continue;
      if (sig > 0)
        std::fprintf(stderr, "headcount serve: %s, finishing the requests in flight\n",
                     sig == SIGTERM ? "SIGTERM" : "SIGINT");
      // stop() before the accept loop has started would be lost: wait for it.
      while (!server.is_running() && !listening_done.load())
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      server.stop();
      return;
    }
  });

  // Returns once stopped and every HTTP thread has finished its request.
  server.listen_after_bind();
  listening_done.store(true);
  signals.join();
  loader.join();
  if (model.scheduler) model.scheduler->stop();
  if (model.decoder_scheduler) model.decoder_scheduler->stop();
  if (model.failed.load()) fail(model.failed_option, model.error);
  std::fprintf(stderr, "headcount serve: stopped\n");
}

}  // namespace headcount::serve
