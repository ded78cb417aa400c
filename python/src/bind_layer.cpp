// MultiHeadAttention (the layer of multi_head_attention.h) and KvCache (kv_cache.h).
// Weights go in and come out as float32 arrays in the library's [in, out] layout (x @ W, the
// transpose of torch.nn.Linear.weight); they are copied into the layer, which owns them (it
// also keeps W_q, W_k, W_v fused), so arrays handed in can be changed afterwards.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>

#include "arrays.h"
#include "bindings.h"
#include "headcount/error.h"
#include "headcount/kv_cache.h"
#include "headcount/multi_head_attention.h"

namespace headcount::python {
namespace {

const char* const kWeightNames[] = {"w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"};

Tensor* weight_slot(MultiHeadAttentionWeights& w, int i) {
  Tensor* slots[] = {&w.w_q, &w.w_k, &w.w_v, &w.w_o, &w.b_q, &w.b_k, &w.b_v, &w.b_o};
  return slots[i];
}

// A C-ordered float32 copy of any array (the layer owns its weights).
Tensor owned_copy(nb::handle object, const char* name) {
  Input in = as_input(object, name, 0);
  if (in.copied() && in.view.is_contiguous()) return std::move(in.copy);
  std::vector<std::int64_t> shape(in.view.shape.begin(), in.view.shape.begin() + in.view.rank);
  Tensor out(DType::f32, shape);
  float* dst = out.data<float>();
  const float* src = in.view.ptr<const float>();
  std::int64_t index[kMaxRank] = {0, 0, 0, 0};
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    std::int64_t offset = 0;
    for (int d = 0; d < in.view.rank; ++d)
      offset += index[d] * in.view.strides[static_cast<std::size_t>(d)];
    dst[i] = src[offset];
    for (int d = in.view.rank - 1; d >= 0; --d) {
      if (++index[d] < shape[static_cast<std::size_t>(d)]) break;
      index[d] = 0;
    }
  }
  return out;
}

Tensor copy_of(const Tensor& t) {
  Tensor out(DType::f32, t.shape());
  std::memcpy(out.data<float>(), t.data<float>(), t.bytes());
  return out;
}

struct PyMultiHeadAttention {
  std::optional<MultiHeadAttention> layer;
};

Tensor output_for(const TensorView& x, std::int64_t width) {
  return Tensor(DType::f32, {x.shape[0], x.shape[1], width});
}

}  // namespace

void register_layer(nb::module_& m) {
  nb::class_<KvCache>(
      m, "KvCache",
      "A KV cache: per layer, K and V of every sequence in float32, bfloat16 or int8\n"
      "(a scale per token and kv head). The capacity is fixed; reserve() is the only\n"
      "call that reallocates, and appending past it is a ValueError.")
      .def(
          "__init__",
          [](KvCache* self, std::int64_t batch, std::int64_t kv_heads, std::int64_t head_dim,
             std::int64_t capacity, std::int64_t layers, std::optional<std::int64_t> v_head_dim,
             const std::string& dtype) {
            new (self) KvCache(KvCacheConfig{.layers = layers,
                                             .batch = batch,
                                             .kv_heads = kv_heads,
                                             .head_dim = head_dim,
                                             .v_head_dim = v_head_dim.value_or(0),
                                             .capacity = capacity,
                                             .dtype = parse_cache_dtype(dtype)});
          },
          nb::arg("batch"), nb::arg("kv_heads"), nb::arg("head_dim"), nb::arg("capacity"),
          nb::kw_only(), nb::arg("layers") = 1, nb::arg("v_head_dim") = nb::none(),
          nb::arg("dtype") = "f32")
      .def_prop_ro("capacity", &KvCache::capacity)
      .def_prop_ro("nbytes", &KvCache::bytes,
                   "Bytes of storage (what `headcount cost --context` reports).")
      .def(
          "lengths",
          [](const KvCache& c, std::int64_t layer) {
            const auto l = c.lengths(layer);
            return std::vector<std::int64_t>(l.begin(), l.end());
          },
          nb::arg("layer") = 0, "Cached positions of each sequence in `layer`.")
      .def("reset", &KvCache::reset, "Every length to 0 (the memory stays mapped).")
      .def("truncate", &KvCache::truncate, nb::arg("sequence"), nb::arg("length"))
      .def("reserve", &KvCache::reserve, nb::arg("capacity"),
           "Grows every sequence to `capacity` positions, keeping what is cached.");

  nb::class_<PyMultiHeadAttention>(
      m, "MultiHeadAttention",
      "The multi-head attention layer: x @ W_qkv (one fused GEMM) -> attention per head, written\n"
      "straight into the concat buffer -> @ W_o. kv_heads < heads is grouped-query attention\n"
      "(1: multi-query). Weights are [in, out] (x @ W), the transpose of torch.nn.Linear.weight.")
      .def(
          "__init__",
          [](PyMultiHeadAttention* self, std::int64_t d_model, std::int64_t heads,
             std::optional<std::int64_t> kv_heads, std::optional<std::int64_t> head_dim,
             std::optional<std::int64_t> v_head_dim, std::optional<std::int64_t> kv_dim, bool bias,
             nb::handle weights, std::uint64_t seed) {
            new (self) PyMultiHeadAttention();
            const MultiHeadAttentionConfig config =
                resolve(MultiHeadAttentionConfig{.d_model = d_model,
                                                 .heads = heads,
                                                 .kv_heads = kv_heads.value_or(0),
                                                 .head_dim = head_dim.value_or(0),
                                                 .v_head_dim = v_head_dim.value_or(0),
                                                 .kv_dim = kv_dim.value_or(0),
                                                 .bias = bias});
            MultiHeadAttentionWeights w;
            if (weights.is_none()) {
              w = MultiHeadAttentionWeights::random(config, seed);
            } else {
              check(nb::isinstance<nb::dict>(weights), "weights",
                    "a dict of arrays (w_q, w_k, w_v, w_o, b_*)",
                    nb::type_name(weights.type()).c_str());
              nb::dict d = nb::borrow<nb::dict>(weights);
              for (auto [key, value] : d) {
                const std::string name = nb::cast<std::string>(nb::str(key));
                const auto* found = std::find_if(std::begin(kWeightNames), std::end(kWeightNames),
                                                 [&](const char* n) { return name == n; });
                check(found != std::end(kWeightNames), "weights",
                      "keys w_q, w_k, w_v, w_o, b_q, b_k, b_v, b_o", name);
              }
              for (int i = 0; i < (bias ? 8 : 4); ++i) {
                check(d.contains(kWeightNames[i]), "weights",
                      std::string("an entry ") + kWeightNames[i], "none");
                *weight_slot(w, i) = owned_copy(d[kWeightNames[i]], kWeightNames[i]);
              }
            }
            self->layer.emplace(config, std::move(w));
          },
          nb::arg("d_model"), nb::arg("heads"), nb::kw_only(), nb::arg("kv_heads") = nb::none(),
          nb::arg("head_dim") = nb::none(), nb::arg("v_head_dim") = nb::none(),
          nb::arg("kv_dim") = nb::none(), nb::arg("bias") = true, nb::arg("weights") = nb::none(),
          nb::arg("seed") = 1,
          "weights: dict of float32 arrays w_q [d_model, heads*head_dim], w_k [kv_dim, "
          "kv_heads*head_dim],\n"
          "w_v [kv_dim, kv_heads*v_head_dim], w_o [heads*v_head_dim, d_model] and (bias=True) b_q, "
          "b_k,\n"
          "b_v, b_o; None: Xavier-uniform weights deterministic in `seed`.")
      .def_prop_ro("config",
                   [](const PyMultiHeadAttention& s) {
                     const auto& c = s.layer->config();
                     nb::dict d;
                     d["d_model"] = c.d_model;
                     d["heads"] = c.heads;
                     d["kv_heads"] = c.kv_heads;
                     d["head_dim"] = c.head_dim;
                     d["v_head_dim"] = c.v_head_dim;
                     d["kv_dim"] = c.kv_dim;
                     d["bias"] = c.bias;
                     return d;
                   })
      .def_prop_ro(
          "weights",
          [](const PyMultiHeadAttention& s) {
            auto& w = const_cast<MultiHeadAttentionWeights&>(s.layer->weights());
            nb::dict d;
            for (int i = 0; i < 8; ++i)
              if (!weight_slot(w, i)->empty())
                d[kWeightNames[i]] = to_numpy(copy_of(*weight_slot(w, i)));
            return d;
          },
          "A copy of the weights as a dict of float32 arrays ([in, out] layout).")
      .def(
          "forward",
          [](const PyMultiHeadAttention& s, nb::handle x_object, nb::handle key, nb::handle value,
             bool causal, nb::handle key_lengths, nb::handle bias, std::optional<float> scale,
             const std::string& kernel, PyContext* context) {
            const auto& c = s.layer->config();
            const Input x = as_input(x_object, "x", 3, false, true);
            const std::vector<std::int64_t> lengths = as_int_list(key_lengths, "key_lengths");
            const std::optional<Input> bias_in = as_optional_input(bias, "bias", 4);
            AttentionOptions options{
                .kernel = parse_kernel(kernel), .causal = causal, .key_lengths = lengths};
            if (bias_in) options.bias = bias_in->view;
            options.scale = scale;
            Tensor out = output_for(x.view, c.d_model);
            check(key.is_none() == value.is_none(), "key, value",
                  "both given (cross-attention) or neither", "one");
            if (key.is_none()) {
              with_context(context, [&](Context& ctx) {
                return s.layer->forward(ctx, x.view, out.view(), options);
              });
            } else {
              const Input k = as_input(key, "key", 3, false, true),
                          v = as_input(value, "value", 3, false, true);
              with_context(context, [&](Context& ctx) {
                return s.layer->forward(ctx, x.view, k.view, v.view, out.view(), options);
              });
            }
            return to_numpy(std::move(out));
          },
          nb::arg("x"), nb::arg("key") = nb::none(), nb::arg("value") = nb::none(), nb::kw_only(),
          nb::arg("causal") = false, nb::arg("key_lengths") = nb::none(),
          nb::arg("bias") = nb::none(), nb::arg("scale") = nb::none(),
          nb::arg("kernel") = "streaming", nb::arg("context") = nb::none(),
          "Self-attention of x [batch, n, d_model] (or cross-attention with key and value [batch, "
          "m,\n"
          "kv_dim]) -> float32 [batch, n, d_model].")
      .def(
          "new_cache",
          [](const PyMultiHeadAttention& s, std::int64_t batch, std::int64_t capacity,
             const std::string& dtype) {
            const auto& c = s.layer->config();
            return KvCache(KvCacheConfig{.layers = 1,
                                         .batch = batch,
                                         .kv_heads = c.kv_heads,
                                         .head_dim = c.head_dim,
                                         .v_head_dim = c.v_head_dim,
                                         .capacity = capacity,
                                         .dtype = parse_cache_dtype(dtype)});
          },
          nb::arg("batch"), nb::arg("capacity"), nb::arg("dtype") = "f32",
          "A one-layer KvCache shaped for this layer (dtype 'f32', 'bf16' or 'int8').")
      .def(
          "prefill",
          [](const PyMultiHeadAttention& s, nb::handle x_object, KvCache& cache, std::int64_t layer,
             nb::handle prompt_lengths, std::optional<float> scale, const std::string& kernel,
             PyContext* context) {
            const Input x = as_input(x_object, "x", 3, false, true);
            const std::vector<std::int64_t> lengths = as_int_list(prompt_lengths, "prompt_lengths");
            PrefillOptions options{
                .kernel = parse_kernel(kernel), .prompt_lengths = lengths, .scale = scale};
            Tensor out = output_for(x.view, s.layer->config().d_model);
            with_context(context, [&](Context& ctx) {
              return s.layer->prefill(ctx, x.view, cache, layer, out.view(), options);
            });
            return to_numpy(std::move(out));
          },
          nb::arg("x"), nb::arg("cache"), nb::arg("layer") = 0, nb::kw_only(),
          nb::arg("prompt_lengths") = nb::none(), nb::arg("scale") = nb::none(),
          nb::arg("kernel") = "streaming", nb::arg("context") = nb::none(),
          "Causal self-attention over the prompt x [batch, n, d_model]; its keys and values go "
          "into\n"
          "`cache` (empty for this layer). prompt_lengths: per sequence, <= n (the rest is "
          "padding).")
      .def(
          "decode_step",
          [](const PyMultiHeadAttention& s, nb::handle x_object, KvCache& cache, std::int64_t layer,
             std::optional<float> scale, PyContext* context) {
            const Input x = as_input(x_object, "x", 3, false, true);
            Tensor out = output_for(x.view, s.layer->config().d_model);
            with_context(context, [&](Context& ctx) {
              return s.layer->decode_step(ctx, x.view, cache, layer, out.view(),
                                          DecodeStepOptions{.scale = scale});
            });
            return to_numpy(std::move(out));
          },
          nb::arg("x"), nb::arg("cache"), nb::arg("layer") = 0, nb::kw_only(),
          nb::arg("scale") = nb::none(), nb::arg("context") = nb::none(),
          "1-16 new tokens per sequence, x [batch, t, d_model]: appended to the cache, then "
          "attending to\n"
          "everything cached (token i sees the cache and the new tokens <= i) -> [batch, t, "
          "d_model].");
}

}  // namespace headcount::python
