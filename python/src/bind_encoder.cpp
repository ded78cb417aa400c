// Encoder: the BERT sentence encoder of encoder.h (all-MiniLM-L6-v2 by default), its
// embeddings, and the per-head analysis of head_analysis.h (statistics and STS importance).
// Loading and reading files raise OSError with the library's message; bad arguments ValueError.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "arrays.h"
#include "bindings.h"
#include "headcount/encoder.h"
#include "headcount/error.h"
#include "headcount/head_analysis.h"
#include "headcount/sts.h"

namespace headcount::python {
namespace {

// Library calls that read files: their Error is a file error in Python.
template <typename Fn>
auto reading_files(Fn&& fn) {
  try {
    return fn();
  } catch (const Error& e) {
    throw FileError{e.what()};
  }
}

std::vector<std::string> as_strings(nb::handle object, const char* name) {
  check(!nb::isinstance<nb::str>(object), name, "a list of strings", "one str (wrap it in a list)");
  std::vector<std::string> out;
  for (nb::handle item : object) {
    check(nb::isinstance<nb::str>(item), name, "a list of strings",
          std::string("an element of type ") + nb::type_name(item.type()).c_str());
    out.push_back(nb::cast<std::string>(item));
  }
  return out;
}

// An STS file path, or pairs (sentence1, sentence2, gold score).
std::vector<StsPair> as_sts_pairs(nb::handle object) {
  if (nb::isinstance<nb::str>(object) || nb::hasattr(object, "__fspath__")) {
    const std::string path = nb::cast<std::string>(nb::str(object));
    return reading_files([&] { return read_sts(path); });
  }
  std::vector<StsPair> pairs;
  for (nb::handle item : object) {
    check(nb::len(item) == 3, "pairs", "(sentence1, sentence2, score) triples",
          std::to_string(nb::len(item)) + " values");
    pairs.push_back(StsPair{.score = nb::cast<double>(item[2]),
                            .sentence1 = nb::cast<std::string>(item[0]),
                            .sentence2 = nb::cast<std::string>(item[1])});
  }
  check(!pairs.empty(), "pairs", "at least one pair", "none");
  return pairs;
}

nb::dict head_to_dict(const HeadStatistics& h) {
  nb::dict d;
  d["layer"] = h.layer;
  d["head"] = h.head;
  d["role"] = role_name(h.role);
  d["rows"] = h.rows;
  nb::dict offsets;
  for (std::size_t i = 0; i < kHeadOffsets.size(); ++i)
    offsets[nb::int_(kHeadOffsets[i])] = h.offsets[i];
  d["offsets"] = offsets;
  d["previous"] = h.previous();
  d["self"] = h.self();
  d["next"] = h.next();
  d["cls"] = h.cls;
  d["sep"] = h.sep;
  d["punctuation"] = h.punctuation;
  d["entropy"] = h.entropy;
  d["uniform_entropy"] = h.uniform_entropy;
  d["normalized_entropy"] = h.normalized_entropy();
  d["distance"] = h.distance;
  d["mass"] = h.mass;
  return d;
}

}  // namespace

void register_encoder(nb::module_& m) {
  nb::class_<BertEncoder>(
      m, "Encoder",
      "A BERT sentence encoder (all-MiniLM-L6-v2 and any directory with model.safetensors,\n"
      "config.json and vocab.txt) run on headcount's attention layer.")
      .def_static(
          "load",
          [](std::optional<std::string> dir, const std::string& dtype) {
            const EncoderLoadOptions options{.dtype = parse_encoder_dtype(dtype)};
            const std::string path = dir.value_or(default_model_dir());
            if (!std::filesystem::exists(path))
              throw FileError{
                  "model: expected a directory with model.safetensors, config.json, vocab.txt, "
                  "got " +
                  path + " (it does not exist; scripts/setup.sh fetches all-MiniLM-L6-v2)"};
            nb::gil_scoped_release release;
            return reading_files([&] { return BertEncoder::load(path, options); });
          },
          nb::arg("dir") = nb::none(), nb::kw_only(), nb::arg("dtype") = "fp32",
          "Loads a model directory (default: models/all-MiniLM-L6-v2 of the checkout the library "
          "was\n"
          "built from, which scripts/setup.sh fills). Every tensor is checked against its shape.\n"
          "dtype: how the projections compute, as the CLI's --dtype: 'fp32', 'bf16' (weights and\n"
          "each projection's input rows rounded to bf16, fp32 sums) or 'int8' (int8 weights per\n"
          "column, int8 input rows per row, exact int32 sums); everything else stays fp32.")
      .def_prop_ro("dim", &BertEncoder::dim)
      .def_prop_ro(
          "dtype",
          [](const BertEncoder& e) {
            const DType d = e.dtype();
            return std::string(d == DType::bf16 ? "bf16" : d == DType::i8 ? "int8" : "fp32");
          },
          "How the projections compute: 'fp32', 'bf16' or 'int8' (Encoder.load's dtype).")
      .def_prop_ro("layers", [](const BertEncoder& e) { return e.config().layers; })
      .def_prop_ro("heads", [](const BertEncoder& e) { return e.config().heads; })
      .def(
          "embed",
          [](const BertEncoder& e, nb::handle texts, std::int64_t batch_size, bool normalize,
             const std::string& kernel, PyContext* context) {
            const std::vector<std::string> t = as_strings(texts, "texts");
            const EmbedOptions options{
                .batch_size = batch_size, .normalize = normalize, .kernel = parse_kernel(kernel)};
            Tensor out =
                with_context(context, [&](Context& ctx) { return e.embed(ctx, t, options); });
            return to_numpy(std::move(out));
          },
          nb::arg("texts"), nb::kw_only(), nb::arg("batch_size") = 32, nb::arg("normalize") = true,
          nb::arg("kernel") = "streaming", nb::arg("context") = nb::none(),
          "Sentence embeddings in input order: float32 [len(texts), dim] (mean pooling, "
          "L2-normalised\n"
          "when normalize and the model asks for it). Texts are batched by length (dynamic "
          "batching).")
      .def(
          "sts",
          [](const BertEncoder& e, nb::handle pairs_object, std::int64_t batch_size,
             PyContext* context) {
            const std::vector<StsPair> pairs = as_sts_pairs(pairs_object);
            const StsResult r = with_context(context, [&](Context& ctx) {
              return evaluate_sts(ctx, e, pairs, EmbedOptions{.batch_size = batch_size});
            });
            nb::dict d;
            d["spearman"] = r.spearman;
            d["pearson"] = r.pearson;
            d["pairs"] = r.pairs;
            return d;
          },
          nb::arg("pairs"), nb::kw_only(), nb::arg("batch_size") = 32,
          nb::arg("context") = nb::none(),
          "STS evaluation of an STS-B file path or (sentence1, sentence2, score) triples: Spearman "
          "and\n"
          "Pearson (x 100) of the cosine similarities against the gold scores.")
      .def(
          "head_stats",
          [](const BertEncoder& e, nb::handle sentences, std::int64_t batch_size,
             const std::string& kernel, PyContext* context) {
            const std::vector<std::string> s = as_strings(sentences, "sentences");
            const HeadAnalysisOptions options{.batch_size = batch_size,
                                              .stats_kernel = parse_kernel(kernel)};
            const HeadAnalysis a = with_context(
                context, [&](Context& ctx) { return analyze_heads(ctx, e, s, options); });
            nb::list heads;
            for (const HeadStatistics& h : a.per_head) heads.append(head_to_dict(h));
            return heads;
          },
          nb::arg("sentences"), nb::kw_only(), nb::arg("batch_size") = 32,
          nb::arg("kernel") = "streaming", nb::arg("context") = nb::none(),
          "Per-head attention statistics (Clark et al. 2019) averaged over every token of "
          "`sentences`,\n"
          "with a role per head: a list of dicts, layer-major (layer, head, role, previous, self, "
          "next,\n"
          "offsets -3..3, cls, sep, punctuation, entropy, uniform_entropy, distance, rows, mass).\n"
          "kernel 'streaming': from the kernel's log-sum-exp, no n^2 probabilities; 'reference': "
          "from\n"
          "the reference kernel's probabilities.")
      .def(
          "importance",
          [](const BertEncoder& e, nb::handle pairs_object, std::int64_t batch_size,
             PyContext* context) {
            const std::vector<StsPair> pairs = as_sts_pairs(pairs_object);
            const HeadAblation a = with_context(context, [&](Context& ctx) {
              return ablate_heads(ctx, e, pairs, HeadAblationOptions{.batch_size = batch_size});
            });
            const std::int64_t layers = e.config().layers, heads = e.config().heads;
            Tensor spearman(DType::f32, {layers, heads}), importance(DType::f32, {layers, heads});
            for (std::size_t i = 0; i < a.spearman.size(); ++i) {
              spearman.data<float>()[i] = static_cast<float>(a.spearman[i]);
              importance.data<float>()[i] = static_cast<float>(a.importance(i));
            }
            nb::dict d;
            d["baseline"] = a.baseline;
            d["pairs"] = a.pairs;
            d["spearman"] = to_numpy(std::move(spearman));
            d["importance"] = to_numpy(std::move(importance));
            return d;
          },
          nb::arg("pairs"), nb::kw_only(), nb::arg("batch_size") = 32,
          nb::arg("context") = nb::none(),
          "Each head's importance: STS Spearman (x 100) with every head (baseline) minus with "
          "that\n"
          "head alone removed. pairs: an STS-B file path or (sentence1, sentence2, score) "
          "triples.\n"
          "Returns {baseline, pairs, spearman [layers, heads], importance [layers, heads]}.");
}

}  // namespace headcount::python
