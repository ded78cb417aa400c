// `headcount embed`: sentence embeddings, one input line each, written in input order.
//   jsonl  one {"text": ..., "embedding": [...]} object per line (floats in shortest round-trip
//   form) tsv    one line per sentence: the embedding's values, TAB-separated (row i = input line
//   i) npy    a float32 [sentences, dim] .npy file at --out (written whole or not at all)
#include <charconv>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "commands.h"
#include "distributed_cli.h"
#include "encoder_cli.h"
#include "headcount/error.h"
#include "headcount/npy.h"
#include "io/atomic_file.h"

namespace headcount::cli {
namespace {

struct EmbedArgs {
  std::string model, format = "jsonl", out, input = "-", dtype = "fp32";
  std::int64_t batch = 32;
  bool no_normalize = false;
  int threads = 0;
  bool distributed = false;         // under mpirun: the sentences split over the ranks
  std::string split = "sentences";  // --split (with --distributed): sentences | heads
  double timeout = 600;             // --timeout (with --distributed)
};

void append_float(std::string& line, float value) {
  char buffer[32];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  line.append(buffer, result.ptr);
}

// Options and input before the model: mistakes should be cheap.
std::vector<std::string> check_and_read(const EmbedArgs& a) {
  check(a.format == "jsonl" || a.format == "npy" || a.format == "tsv", "--format",
        "jsonl, npy or tsv", a.format);
  check(a.batch >= 1, "--batch", ">= 1", a.batch);
  parse_dtype_option(a.dtype);
  check(a.format != "npy" || !a.out.empty(), "--out",
        "a file path for --format npy (binary, not for stdout)", "nothing");
  check(a.timeout >= 0, "--timeout", ">= 0 seconds", a.timeout);
  return read_sentences(a.input);
}

void write_embeddings(const EmbedArgs& a, const std::vector<std::string>& sentences,
                      const Tensor& embeddings) {
  if (a.format == "npy") {
    write_npy(a.out, embeddings.view());
    return;
  }
  // A file goes through io::AtomicFile (a kill mid-write leaves the previous file intact);
  // stdout is streamed.
  std::unique_ptr<io::AtomicFile> file;
  if (!a.out.empty()) file = std::make_unique<io::AtomicFile>(a.out);
  const std::int64_t d = embeddings.size(1);
  std::string line;
  for (std::size_t i = 0; i < sentences.size(); ++i) {
    const float* row = embeddings.data<const float>() + static_cast<std::int64_t>(i) * d;
    line.clear();
    if (a.format == "jsonl") {
      // Invalid UTF-8 in the input is written as U+FFFD, so every line is valid JSON.
      line += "{\"text\": ";
      line += nlohmann::json(sentences[i])
                  .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
      line += ", \"embedding\": [";
      for (std::int64_t k = 0; k < d; ++k) {
        if (k) line += ", ";
        append_float(line, row[k]);
      }
      line += "]}\n";
    } else {
      for (std::int64_t k = 0; k < d; ++k) {
        if (k) line += '\t';
        append_float(line, row[k]);
      }
      line += '\n';
    }
    if (file)
      file->write(line.data(), line.size());
    else
      std::cout << line;
  }
  if (file) {
    file->commit();
    return;
  }
  std::cout.flush();
  if (!std::cout) fail("stdout", "write failed");
}

void run_embed(const EmbedArgs& a) {
  const EmbedOptions options{
      .batch_size = a.batch, .normalize = !a.no_normalize, .progress = progress_reporter("embed")};
  if (a.distributed) {
    run_distributed_embed(
        {.read = [&] { return check_and_read(a); },
         .load = [&] { return load_encoder(a.model, parse_dtype_option(a.dtype)); },
         .split = a.split,
         .load_weights =
             [&] {
               check(a.dtype == "fp32", "--dtype",
                     "fp32 with --split heads (the slices are cut "
                     "from the fp32 weights)",
                     a.dtype);
               return read_encoder_weights(resolve_model_dir(a.model));
             },
         .options = options,
         .threads = resolve_threads(a.threads),
         .timeout_seconds = a.timeout,
         .write = [&](const std::vector<std::string>& sentences,
                      const Tensor& embeddings) { write_embeddings(a, sentences, embeddings); }});
    return;
  }
  // 1. Options and input, then the model.
  const std::vector<std::string> sentences = check_and_read(a);
  const BertEncoder encoder = load_encoder(a.model, parse_dtype_option(a.dtype));
  Context ctx({.threads = resolve_threads(a.threads)});
  // 2. Embed (dynamic batching inside; rows come back in input order).
  const Tensor embeddings = encoder.embed(ctx, sentences, options);
  // 3. Write.
  write_embeddings(a, sentences, embeddings);
}

}  // namespace

#ifndef HEADCOUNT_HAVE_MPI
void run_distributed_embed(const DistributedEmbedJob&) {
  fail("--distributed", "this build has no MPI (configure with -DHEADCOUNT_MPI=ON)");
}
#endif

void register_embed(CLI::App& app) {
  auto a = std::make_shared<EmbedArgs>();
  CLI::App* cmd = app.add_subcommand(
      "embed", "Sentence embeddings (all-MiniLM-L6-v2 by default), one per input line");
  cmd->add_option("input", a->input, "Text file, one sentence per line, or - for stdin")
      ->capture_default_str();
  cmd->add_option("--model", a->model, model_option_help());
  cmd->add_option("--format", a->format, "jsonl, tsv or npy")->capture_default_str();
  cmd->add_option("--out", a->out, "Output file (required for npy; default stdout)");
  cmd->add_option("--batch", a->batch, "Sentences per forward pass (batched by length)")
      ->capture_default_str();
  cmd->add_option("--dtype", a->dtype, kDtypeHelp)->capture_default_str();
  cmd->add_flag("--no-normalize", a->no_normalize, "Mean pooling without L2 normalisation");
  cmd->add_option("--threads", a->threads, "Worker threads (0: all cores)")->capture_default_str();
  cmd->add_flag("--distributed", a->distributed,
                "Under mpirun: split the work over the ranks (rank 0 reads the input and "
                "writes the output)");
  cmd->add_option("--split", a->split,
                  "With --distributed: sentences (each rank embeds a shard; bitwise the "
                  "one-process embeddings) or heads (each rank holds 1/P of every layer's heads "
                  "and FFN, two all-reduces a layer; within the bound of docs/distributed.md)")
      ->capture_default_str();
  cmd->add_option("--timeout", a->timeout,
                  "With --distributed: seconds a rank waits for the others before the job is "
                  "ended, naming the rank that did not arrive (0: forever)")
      ->capture_default_str();
  cmd->callback([a] { run_embed(*a); });
}

}  // namespace headcount::cli
