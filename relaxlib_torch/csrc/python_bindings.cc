// Direct Python entry points for the synchronous collectives. Calling through torch.ops costs
// about 1.7 us per call in schema matching and IValue boxing, more than the core's own work for a
// small tensor; these bindings convert the arguments with pybind11 and release the GIL while the
// collective runs, as the dispatcher does.
#include <torch/extension.h>

#include <string>

#include "sync_ops.h"

namespace py = pybind11;

namespace {

// Errors surface as the dispatcher would raise them: c10::TypeError as TypeError, any other
// c10::Error as RuntimeError, without the C++ backtrace.
void translate_errors(std::exception_ptr error) {
  try {
    if (error) std::rethrow_exception(error);
  } catch (const c10::TypeError& e) {
    PyErr_SetString(PyExc_TypeError, e.what_without_backtrace());
  } catch (const c10::Error& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what_without_backtrace());
  }
}

// Between the slices of a synchronous wait: runs Python's signal handlers and raises what they
// raise (KeyboardInterrupt for Ctrl-C, pytest-timeout's alarm).
void raise_pending_signal() {
  py::gil_scoped_acquire gil;
  if (PyErr_CheckSignals() != 0) throw py::error_already_set();
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "relaxlib's synchronous torch collectives, called directly (see relaxlib_torch.mpi_ops)";
  py::register_local_exception_translator(translate_errors);
  relaxlib_torch::set_interrupt_check(raise_pending_signal);
  m.def("allreduce_sync", &relaxlib_torch::allreduce_sync, py::call_guard<py::gil_scoped_release>(),
        "Reduces input into output (may be the same tensor) over a process set; returns when done.",
        py::arg("input"), py::arg("output"), py::arg("name"), py::arg("op"), py::arg("prescale"),
        py::arg("postscale"), py::arg("process_set"));
  m.def("allgather_sync", &relaxlib_torch::allgather_sync, py::call_guard<py::gil_scoped_release>(),
        "Concatenates every member's input along dimension 0 and returns the result.", py::arg("input"),
        py::arg("name"), py::arg("process_set"));
  m.def("reducescatter_sync", &relaxlib_torch::reducescatter_sync, py::call_guard<py::gil_scoped_release>(),
        "Reduces input over a process set and returns this member's block of dimension 0.", py::arg("input"),
        py::arg("name"), py::arg("op"), py::arg("prescale"), py::arg("postscale"), py::arg("process_set"));
}
