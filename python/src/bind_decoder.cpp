// Decoder: the Llama-family decoder of decoder.h (SmolLM2-135M from its GGUF file): text
// generation, logits of a token sequence, the tokenizer. Reading the file raises OSError with
// the library's message; bad arguments ValueError.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>
#include <vector>

#include "arrays.h"
#include "bindings.h"
#include "headcount/bpe.h"
#include "headcount/decoder.h"
#include "headcount/error.h"

namespace headcount::python {
namespace {

DecoderOptions parse_weights(const std::string& name) {
  return parse_decoder_weights(name, "weights");  // Error -> ValueError, naming the value
}

CacheDType parse_kv(const std::string& name) {
  if (name == "fp32") return CacheDType::f32;
  if (name == "bf16") return CacheDType::bf16;
  if (name == "int8") return CacheDType::int8;
  fail("kv_dtype", "expected 'fp32', 'bf16' or 'int8', got '" + name + "'");
}

// A prompt: text (encoded, special-token spellings included; with chat, wrapped in ChatML as a
// user turn) or a list of token ids.
std::vector<std::int32_t> as_prompt(const LlamaDecoder& d, nb::handle prompt, bool chat) {
  if (nb::isinstance<nb::str>(prompt)) {
    const std::string text = nb::cast<std::string>(prompt);
    return d.tokenizer().encode(
        chat ? format_chatml({{.role = "user", .content = text}},
                             {.default_system = std::string(kSmolLM2SystemPrompt)})
             : text);
  }
  check(!chat, "chat", "a str prompt (the template wraps text)", "a list of ids");
  std::vector<std::int32_t> ids;
  for (std::int64_t id : as_int_list(prompt, "prompt"))
    ids.push_back(static_cast<std::int32_t>(id));
  return ids;
}

}  // namespace

void register_decoder(nb::module_& m) {
  nb::class_<LlamaDecoder>(
      m, "Decoder",
      "A Llama-family decoder (SmolLM2-135M) read from a GGUF file, run on headcount's layers:\n"
      "the prompt through the streaming kernel (causal, grouped-query), each new token through\n"
      "the decode kernel and a KV cache.")
      .def_static(
          "load",
          [](const std::string& path, const std::string& weights) {
            const DecoderOptions options = parse_weights(weights);
            nb::gil_scoped_release release;
            try {
              return LlamaDecoder::load(path, options);
            } catch (const Error& e) {
              throw FileError{e.what()};
            }
          },
          nb::arg("path"), nb::kw_only(), nb::arg("weights") = "fp32",
          "Loads a GGUF file of architecture 'llama' (weights dequantized to fp32, Q/K rows in\n"
          "Hugging Face's order). weights: how the projections multiply, as the CLI's --weights:\n"
          "'fp32' (the reference), 'bf16', 'int8' or 'quantized' (the file's own Q4_1/Q8_0\n"
          "blocks, inputs quantized to int8 in blocks of 32 as llama.cpp does).")
      .def_prop_ro("layers", [](const LlamaDecoder& d) { return d.config().layer_count(); })
      .def_prop_ro("heads", [](const LlamaDecoder& d) { return d.config().heads_in(0); })
      .def_prop_ro("kv_heads", [](const LlamaDecoder& d) { return d.config().kv_heads_in(0); })
      .def_prop_ro("vocab", [](const LlamaDecoder& d) { return d.config().vocab; })
      .def_prop_ro("context_length", [](const LlamaDecoder& d) { return d.config().context; })
      .def_prop_ro("eos_id", [](const LlamaDecoder& d) { return d.tokenizer().eos_id(); })
      .def(
          "tokenize",
          [](const LlamaDecoder& d, const std::string& text, bool chat) {
            return as_prompt(d, nb::str(text.c_str(), text.size()), chat);
          },
          nb::arg("text"), nb::kw_only(), nb::arg("chat") = false,
          "Token ids of text (special-token spellings become their ids; chat: ChatML user turn).")
      .def(
          "detokenize",
          [](const LlamaDecoder& d, nb::handle ids) {
            std::vector<std::int32_t> v;
            for (std::int64_t id : as_int_list(ids, "ids"))
              v.push_back(static_cast<std::int32_t>(id));
            return nb::bytes(d.tokenizer().decode(v).data(), d.tokenizer().decode(v).size());
          },
          nb::arg("ids"), "The bytes the ids stand for (a character may span tokens).")
      .def(
          "logits",
          [](const LlamaDecoder& d, nb::handle ids, PyContext* context) {
            std::vector<std::int32_t> v;
            for (std::int64_t id : as_int_list(ids, "ids"))
              v.push_back(static_cast<std::int32_t>(id));
            check(!v.empty(), "ids", "at least one token", "none");
            Tensor out = with_context(context, [&](Context& ctx) {
              KvCache cache = d.make_cache(static_cast<std::int64_t>(v.size()));
              return d.executor().forward(ctx, v, cache, Logits::all);
            });
            return to_numpy(std::move(out));
          },
          nb::arg("ids"), nb::kw_only(), nb::arg("context") = nb::none(),
          "float32 [len(ids), vocab]: the logits of every position of one prefill (position i\n"
          "predicts token i + 1).")
      .def(
          "generate",
          [](const LlamaDecoder& d, nb::handle prompt, std::int64_t max_tokens, float temperature,
             float top_p, std::uint64_t seed, bool chat, const std::string& kv_dtype,
             bool stop_at_eos, PyContext* context) {
            const std::vector<std::int32_t> ids = as_prompt(d, prompt, chat);
            const GenerateOptions options{.max_tokens = max_tokens,
                                          .temperature = temperature,
                                          .top_p = top_p,
                                          .seed = seed,
                                          .kv_dtype = parse_kv(kv_dtype),
                                          .stop_at_eos = stop_at_eos};
            const GenerateResult r =
                with_context(context, [&](Context& ctx) { return d.generate(ctx, ids, options); });
            std::string text;
            for (std::int32_t t : r.tokens)
              if (d.tokenizer().token_type(t) != TokenType::control)
                text += d.tokenizer().token_bytes(t);
            nb::dict out;
            out["prompt_tokens"] = ids;
            out["tokens"] = r.tokens;
            out["text"] = nb::str(text.c_str(), text.size());
            out["prefill_tokens_per_second"] =
                static_cast<double>(r.prompt_tokens) / r.prefill_seconds;
            out["decode_tokens_per_second"] =
                r.decode_steps > 0 ? static_cast<double>(r.decode_steps) / r.decode_seconds : 0.0;
            out["kv_cache_bytes"] = r.cache_bytes;
            return out;
          },
          nb::arg("prompt"), nb::kw_only(), nb::arg("max_tokens") = 128,
          nb::arg("temperature") = 0.0f, nb::arg("top_p") = 1.0f, nb::arg("seed") = 0,
          nb::arg("chat") = false, nb::arg("kv_dtype") = "fp32", nb::arg("stop_at_eos") = true,
          nb::arg("context") = nb::none(),
          "Generates after prompt (a str, or a list of ids): greedy at temperature 0, else\n"
          "top-p sampling with the seed. Returns a dict as the CLI's --json: prompt_tokens,\n"
          "tokens, text, prefill_tokens_per_second, decode_tokens_per_second, kv_cache_bytes.");
}

}  // namespace headcount::python
