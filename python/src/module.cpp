// The extension module headcount._headcount: registers every binding and turns the library's
// errors into Python exceptions (headcount::Error -> ValueError with its one-line message,
// FileError -> OSError). The pure-Python package (python/headcount/) wraps it.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "bindings.h"
#include "headcount/error.h"
#include "headcount/isa.h"
#include "headcount/version.h"

namespace headcount::python {

void register_context(nb::module_& m) {
  nb::class_<PyContext>(m, "Context",
                        "Threads and reusable scratch memory for headcount's kernels.\n\n"
                        "Pass one as ``context=`` to any computing call. A Context is used by one\n"
                        "call at a time (calls from other threads wait for it). Without one, each\n"
                        "Python thread uses its own single-threaded Context.")
      .def(
          "__init__",
          [](PyContext* self, int threads, const std::string& isa) {
            new (self) PyContext(ContextOptions{.threads = threads, .isa = parse_isa(isa)});
          },
          nb::arg("threads") = 1, nb::arg("isa") = "best",
          "threads: workers including the calling thread (>= 1); isa: 'best', 'generic', "
          "'avx2', 'avx512', 'avx512_bf16' or 'amx_bf16' (an unsupported one is a ValueError).")
      .def_prop_ro("threads", [](PyContext& c) { return c.ctx.threads(); })
      .def_prop_ro("isa", [](PyContext& c) { return std::string(isa_name(c.ctx.isa())); })
      .def("__repr__", [](PyContext& c) {
        return "Context(threads=" + std::to_string(c.ctx.threads()) + ", isa='" +
               isa_name(c.ctx.isa()) + "')";
      });
}

}  // namespace headcount::python

NB_MODULE(_headcount, m) {
  using namespace headcount::python;
  m.doc() = "headcount's C++ core: attention kernels, the layer, the encoder and the cost model.";
  m.attr("__version__") = headcount::version();
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const FileError& e) {
      PyErr_SetString(PyExc_OSError, e.message.c_str());
    } catch (const headcount::Error& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
  register_context(m);
  register_attention(m);
  register_cost(m);
  register_layer(m);
  register_encoder(m);
  register_decoder(m);
}
