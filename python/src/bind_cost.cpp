// cost_json(...): the cost model as `headcount cost --json` prints it (the same function,
// cost_to_json); the Python wrapper headcount.cost() parses it into a dict.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <optional>

#include "bindings.h"
#include "headcount/cost.h"
#include "headcount/error.h"

namespace headcount::python {

void register_cost(nb::module_& m) {
  m.def(
      "cost_json",
      [](std::int64_t d_model, std::int64_t heads, std::optional<std::int64_t> kv_heads,
         std::int64_t seq_len, std::optional<std::int64_t> kv_len,
         std::optional<std::int64_t> head_dim, std::optional<std::int64_t> v_head_dim,
         std::int64_t batch, std::optional<std::int64_t> d_ff, const std::string& dtype,
         int threads, std::int64_t context, std::int64_t layers) {
        check(dtype == "f32" || dtype == "bf16", "dtype", "f32 or bf16", dtype);
        // 0 means "the default" in CostConfig; None is how Python says it, so an explicit 0
        // is passed through as -1 to be refused by resolve() rather than read as a default.
        const auto given = [](const std::optional<std::int64_t>& v) {
          return v ? (*v == 0 ? -1 : *v) : 0;
        };
        const CostConfig config{.d_model = d_model,
                                .heads = heads,
                                .kv_heads = given(kv_heads),
                                .head_dim = given(head_dim),
                                .v_head_dim = given(v_head_dim),
                                .seq_len = seq_len,
                                .kv_len = given(kv_len),
                                .batch = batch,
                                .d_ff = given(d_ff),
                                .dtype = dtype == "f32" ? DType::f32 : DType::bf16,
                                .threads = threads,
                                .context = context,
                                .layers = layers};
        return cost_to_json(estimate_cost(config));
      },
      nb::arg("d_model"), nb::arg("heads"), nb::kw_only(), nb::arg("kv_heads") = nb::none(),
      nb::arg("seq_len") = 1, nb::arg("kv_len") = nb::none(), nb::arg("head_dim") = nb::none(),
      nb::arg("v_head_dim") = nb::none(), nb::arg("batch") = 1, nb::arg("d_ff") = nb::none(),
      nb::arg("dtype") = "f32", nb::arg("threads") = 1, nb::arg("context") = 0,
      nb::arg("layers") = 1, "The cost model's JSON text (what `headcount cost --json` prints).");
}

}  // namespace headcount::python
