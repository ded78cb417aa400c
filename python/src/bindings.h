// What the binding files share: the Python-side Context (a headcount::Context plus a lock, so
// two Python threads that pass the same Context take turns instead of racing on its scratch),
// the errors Python sees, and one register function per file.
#pragma once

#include <nanobind/nanobind.h>

#include <memory>
#include <mutex>
#include <string>

#include "headcount/context.h"

namespace headcount::python {

namespace nb = nanobind;

struct PyContext {
  explicit PyContext(ContextOptions options) : ctx(options) {}
  Context ctx;
  std::mutex mutex;
};

// A file could not be read (missing, unreadable, malformed): raised in Python as OSError with
// the library's one-line message. Every other headcount::Error becomes a ValueError.
struct FileError {
  std::string message;
};

// Runs fn(Context&) with the GIL released and the context locked. `context` None: a
// single-threaded Context private to the calling thread (kept, so its scratch stays warm).
template <typename Fn>
auto with_context(PyContext* context, Fn&& fn) {
  if (context == nullptr) {
    thread_local PyContext fallback(ContextOptions{.threads = 1});
    context = &fallback;
  }
  nb::gil_scoped_release release;
  std::lock_guard<std::mutex> lock(context->mutex);
  return fn(context->ctx);
}

void register_context(nb::module_& m);
void register_attention(nb::module_& m);
void register_cost(nb::module_& m);
void register_layer(nb::module_& m);
void register_encoder(nb::module_& m);
void register_decoder(nb::module_& m);

}  // namespace headcount::python
