// attention() and attention_backward(): the kernels of attention.h / attention_backward.h on
// Python arrays. Inputs are read in place (arrays.h); outputs are new numpy arrays or `out=`.
// Every check is the library's own (validate, validate_backward): its one-line message comes
// back as ValueError. The GIL is released while a kernel runs.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "arrays.h"
#include "bindings.h"
#include "headcount/attention.h"
#include "headcount/attention_backward.h"
#include "headcount/error.h"

namespace headcount::python {
namespace {

// The mask and scale arguments the forward and backward share, parsed once.
struct MaskArgs {
  std::optional<float> scale;
  std::int64_t window_left = -1, window_right = -1;
  std::vector<std::int64_t> key_lengths;
  std::optional<Input> bias;
};

MaskArgs parse_masks(nb::handle scale, nb::handle window, nb::handle key_lengths, nb::handle bias) {
  MaskArgs m;
  if (!scale.is_none()) {
    double s = 0;
    if (!nb::try_cast(scale, s))
      fail("scale",
           "expected a number or None, got " + std::string(nb::type_name(scale.type()).c_str()));
    check(std::isfinite(s) && std::isfinite(static_cast<float>(s)), "scale", "a finite number", s);
    m.scale = static_cast<float>(s);
  }
  if (!window.is_none()) {
    // (left, right): keys i - left .. i + right stay visible; None or -1: unbounded side.
    check(nb::isinstance<nb::tuple>(window) || nb::isinstance<nb::list>(window), "window",
          "a (left, right) pair", nb::type_name(window.type()).c_str());
    check(nb::len(window) == 2, "window", "a (left, right) pair",
          std::to_string(nb::len(window)) + " values");
    std::int64_t* sides[2] = {&m.window_left, &m.window_right};
    for (int i = 0; i < 2; ++i) {
      nb::handle side = window[i];
      if (side.is_none()) continue;
      if (!nb::try_cast(side, *sides[i]))
        fail("window",
             "expected integers or None, got " + std::string(nb::type_name(side.type()).c_str()));
    }
  }
  m.key_lengths = as_int_list(key_lengths, "key_lengths");
  m.bias = as_optional_input(bias, "bias", 4);
  return m;
}

AttentionParams make_params(const Input& q, const Input& k, const Input& v, const MaskArgs& m,
                            bool causal) {
  AttentionParams p;
  p.q = q.view;
  p.k = k.view;
  p.v = v.view;
  p.scale = m.scale;
  p.causal = causal;
  p.window_left = m.window_left;
  p.window_right = m.window_right;
  p.key_lengths = m.key_lengths;
  if (m.bias) p.bias = m.bias->view;
  return p;
}

// q, k, v must all be float32 or all bfloat16 (the kernels' rule): a mix is converted to
// float32 so the caller's float64 or mixed inputs still work.
void unify_dtypes(Input& q, Input& k, Input& v, nb::handle qo, nb::handle ko, nb::handle vo) {
  if (q.view.dtype == k.view.dtype && k.view.dtype == v.view.dtype) return;
  if (q.view.dtype == DType::bf16) q = as_input(qo, "q", 4, false);
  if (k.view.dtype == DType::bf16) k = as_input(ko, "k", 4, false);
  if (v.view.dtype == DType::bf16) v = as_input(vo, "v", 4, false);
}

std::int64_t dim(const TensorView& v, int d) { return v.shape[static_cast<std::size_t>(d)]; }

nb::object attention_py(nb::handle qo, nb::handle ko, nb::handle vo, bool causal, nb::handle scale,
                        nb::handle window, nb::handle key_lengths, nb::handle bias,
                        const std::string& kernel_name, bool return_lse, nb::handle out_object,
                        PyContext* context) {
  const Kernel kernel = parse_kernel(kernel_name);
  Input q = as_input(qo, "q", 4, true), k = as_input(ko, "k", 4, true),
        v = as_input(vo, "v", 4, true);
  unify_dtypes(q, k, v, qo, ko, vo);
  const MaskArgs masks = parse_masks(scale, window, key_lengths, bias);
  AttentionParams p = make_params(q, k, v, masks, causal);

  const std::int64_t batch = dim(q.view, 0), q_len = dim(q.view, 1), heads = dim(q.view, 2);
  Tensor out, lse;
  if (out_object.is_none()) {
    out = Tensor(DType::f32, {batch, q_len, heads, dim(v.view, 3)});
    p.out = out.view();
  } else {
    p.out = as_output(out_object, "out");
  }
  if (return_lse) {
    lse = Tensor(DType::f32, {batch, heads, q_len});
    p.lse = lse.view();
  }
  // The kernel validates p (shapes, strides, masks, finite inputs) before any work; its Error
  // crosses with_context and becomes the ValueError. Validating here as well would scan the
  // inputs twice (the finiteness check is most of the call overhead at small sizes).
  with_context(context, [&](Context& ctx) { return attention(ctx, kernel, p); });

  nb::object result = out_object.is_none() ? to_numpy(std::move(out)) : nb::borrow(out_object);
  if (!return_lse) return result;
  return nb::make_tuple(result, to_numpy(std::move(lse)));
}

nb::object attention_backward_py(nb::handle qo, nb::handle ko, nb::handle vo, nb::handle out_object,
                                 nb::handle lse_object, nb::handle d_out_object, bool causal,
                                 nb::handle scale, nb::handle window, nb::handle key_lengths,
                                 nb::handle bias, const std::string& kernel_name,
                                 bool return_d_bias, PyContext* context) {
  const Kernel kernel = parse_kernel(kernel_name);
  Input q = as_input(qo, "q", 4, true), k = as_input(ko, "k", 4, true),
        v = as_input(vo, "v", 4, true);
  unify_dtypes(q, k, v, qo, ko, vo);
  const MaskArgs masks = parse_masks(scale, window, key_lengths, bias);
  AttentionParams p = make_params(q, k, v, masks, causal);
  const std::optional<Input> out = as_optional_input(out_object, "out", 4);
  const std::optional<Input> lse = as_optional_input(lse_object, "lse", 3);
  if (kernel == Kernel::streaming) {
    check(out && lse, "out, lse",
          "the forward's out and lse (attention(..., return_lse=True)) for the "
          "streaming backward",
          "None");
  }
  if (out) p.out = out->view;
  if (lse) p.lse = lse->view;
  const Input d_out = as_input(d_out_object, "d_out", 4);
  if (return_d_bias)
    check(masks.bias.has_value(), "return_d_bias", "a bias (the gradient of which bias?)",
          "bias=None");

  Tensor d_q(DType::f32, {dim(q.view, 0), dim(q.view, 1), dim(q.view, 2), dim(q.view, 3)});
  Tensor d_k(DType::f32, {dim(k.view, 0), dim(k.view, 1), dim(k.view, 2), dim(k.view, 3)});
  Tensor d_v(DType::f32, {dim(v.view, 0), dim(v.view, 1), dim(v.view, 2), dim(v.view, 3)});
  Tensor d_bias;
  AttentionGrads g{.d_out = d_out.view, .d_q = d_q.view(), .d_k = d_k.view(), .d_v = d_v.view()};
  if (return_d_bias) {
    const TensorView& b = masks.bias->view;
    d_bias = Tensor(DType::f32, {dim(b, 0), dim(b, 1), dim(b, 2), dim(b, 3)});
    g.d_bias = d_bias.view();
  }
  with_context(context, [&](Context& ctx) { return attention_backward(ctx, kernel, p, g); });
  if (return_d_bias)
    return nb::make_tuple(to_numpy(std::move(d_q)), to_numpy(std::move(d_k)),
                          to_numpy(std::move(d_v)), to_numpy(std::move(d_bias)));
  return nb::make_tuple(to_numpy(std::move(d_q)), to_numpy(std::move(d_k)),
                        to_numpy(std::move(d_v)));
}

}  // namespace

void register_attention(nb::module_& m) {
  // For the tests: the address the kernels would read for an input, and whether it was copied.
  m.def(
      "_input_pointer",
      [](nb::handle object) {
        const Input in = as_input(object, "x", 0, true);
        return nb::make_tuple(reinterpret_cast<std::uintptr_t>(in.view.data), in.copied());
      },
      nb::arg("x"));
  // For bench/python_overhead.py: the same kernel call timed in C++ (inputs already views,
  // output preallocated, the context warm), per call in seconds, so the Python call's overhead
  // is measured against it in one process on the same data.
  m.def(
      "_time_attention_cpp",
      [](nb::handle qo, nb::handle ko, nb::handle vo, int repeats, const std::string& kernel_name,
         PyContext* context) {
        const Kernel kernel = parse_kernel(kernel_name);
        const Input q = as_input(qo, "q", 4, true), k = as_input(ko, "k", 4, true),
                    v = as_input(vo, "v", 4, true);
        AttentionParams p = make_params(q, k, v, MaskArgs{}, false);
        Tensor out(DType::f32, {dim(q.view, 0), dim(q.view, 1), dim(q.view, 2), dim(v.view, 3)});
        p.out = out.view();
        validate(p);
        std::vector<double> seconds(static_cast<std::size_t>(repeats));
        with_context(context, [&](Context& ctx) {
          for (double& s : seconds) {
            const auto start = std::chrono::steady_clock::now();
            attention(ctx, kernel, p);
            s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          }
          return 0;
        });
        return seconds;
      },
      nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("repeats"), nb::arg("kernel") = "streaming",
      nb::arg("context") = nb::none());
  m.def("attention", &attention_py,
        nb::sig("def attention(q: numpy.typing.ArrayLike, k: numpy.typing.ArrayLike, v: "
                "numpy.typing.ArrayLike, *, "
                "causal: bool = False, scale: float | None = None, window: tuple[int | None, int | "
                "None] | None = None, "
                "key_lengths: collections.abc.Sequence[int] | None = None, bias: "
                "numpy.typing.ArrayLike | None = None, "
                "kernel: str = 'streaming', return_lse: bool = False, out: numpy.typing.ArrayLike "
                "| None = None, "
                "context: Context | None = None) -> numpy.typing.NDArray[numpy.float32] | "
                "tuple[numpy.typing.NDArray[numpy.float32], numpy.typing.NDArray[numpy.float32]]"),
        nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::kw_only(), nb::arg("causal") = false,
        nb::arg("scale") = nb::none(), nb::arg("window") = nb::none(),
        nb::arg("key_lengths") = nb::none(), nb::arg("bias") = nb::none(),
        nb::arg("kernel") = "streaming", nb::arg("return_lse") = false, nb::arg("out") = nb::none(),
        nb::arg("context") = nb::none(),
        R"doc(Exact attention softmax(scale * q k^T + bias) v over the visible keys.

q [batch, q_len, heads, head_dim], k [batch, kv_len, kv_heads, head_dim],
v [batch, kv_len, kv_heads, v_head_dim]; kv_heads divides heads (query head i reads
kv head i // (heads // kv_heads): MHA, GQA and MQA). float32 and bfloat16 inputs are read in
place (any strides, numpy or DLPack/torch); float16/float64 are converted to one float32 copy.

causal: query i sees key j <= i + kv_len - q_len (bottom-right aligned). window=(left, right):
keys within left before and right after the diagonal (None: unbounded). key_lengths: per batch
element, keys past it are padding. bias: float32 [batch or 1, heads or 1, q_len, kv_len], added
to the scaled scores (-inf masks). scale: default 1/sqrt(head_dim). kernel: 'streaming'
(tiled, online softmax) or 'reference' (the double-accumulating oracle).
A row that sees no key outputs zeros and lse = -inf.

Returns out float32 [batch, q_len, heads, v_head_dim] (or writes `out`, float32, and
returns it); with return_lse=True the pair (out, lse [batch, heads, q_len]).)doc");
  m.def("attention_backward", &attention_backward_py,
        nb::sig("def attention_backward(q: numpy.typing.ArrayLike, k: numpy.typing.ArrayLike, v: "
                "numpy.typing.ArrayLike, "
                "out: numpy.typing.ArrayLike | None, lse: numpy.typing.ArrayLike | None, d_out: "
                "numpy.typing.ArrayLike, *, "
                "causal: bool = False, scale: float | None = None, window: tuple[int | None, int | "
                "None] | None = None, "
                "key_lengths: collections.abc.Sequence[int] | None = None, bias: "
                "numpy.typing.ArrayLike | None = None, "
                "kernel: str = 'streaming', return_d_bias: bool = False, context: Context | None = "
                "None) -> "
                "tuple[numpy.typing.NDArray[numpy.float32], ...]"),
        nb::arg("q"), nb::arg("k"), nb::arg("v"), nb::arg("out").none(), nb::arg("lse").none(),
        nb::arg("d_out"), nb::kw_only(), nb::arg("causal") = false, nb::arg("scale") = nb::none(),
        nb::arg("window") = nb::none(), nb::arg("key_lengths") = nb::none(),
        nb::arg("bias") = nb::none(), nb::arg("kernel") = "streaming",
        nb::arg("return_d_bias") = false, nb::arg("context") = nb::none(),
        R"doc(Gradients of sum(out * d_out) with respect to q, k, v (and bias).

The same q, k, v and mask arguments as the forward; out and lse are the forward's results
(attention(..., return_lse=True)); the streaming kernel (FlashAttention-2's backward) needs
them, the reference kernel recomputes them (pass None). Returns (d_q, d_k, d_v) as float32
arrays shaped like q, k, v, plus d_bias (the bias's shape) when return_d_bias=True.
GQA/MQA: d_k and d_v sum over each kv head's group of query heads.)doc");
}

}  // namespace headcount::python
