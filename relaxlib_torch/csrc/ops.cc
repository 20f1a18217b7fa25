// PyTorch glue: registers torch.ops.relaxlib.* and converts tensors to core requests.
// Only the C ABI (relax/relax.h) is called; no MPI, no algorithm logic lives here. The compressed
// all-reduce's entry points are in compressed_ops.cc, the request plumbing in binding.h.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "binding.h"
#include "relax/relax.h"
#include "relax/request_builder.h"
#include "sync_ops.h"

namespace relaxlib_torch {
namespace {

// Synchronous requests whose caller was interrupted: still pending in the engine, which may
// write their buffers until they complete, so they are kept for the life of the process.
std::vector<std::unique_ptr<InFlight>> g_abandoned;
std::atomic<InterruptCheck> g_interrupt_check{nullptr};
constexpr int32_t kWaitSliceMs = 50;

relax_request_t allreduce_request(const at::Tensor& input, const at::Tensor& output, const std::string& name,
                                  int64_t op, double prescale, double postscale, int64_t process_set) {
  return checked(RELAX_REQ_ALLREDUCE, &name, 1, process_set, [&] {
    return same_shape_request(RELAX_REQ_ALLREDUCE, "allreduce", input, output, name, process_set)
        .reduce(static_cast<int32_t>(op), prescale, postscale)
        .get();
  });
}

int64_t allreduce_async(const at::Tensor& input, const at::Tensor& output, const std::string& name, int64_t op,
                        double prescale, double postscale, int64_t process_set) {
  const relax_request_t r = allreduce_request(input, output, name, op, prescale, postscale, process_set);
  return submit(r, std::make_unique<InFlight>(InFlight{input, output, input.scalar_type()}), false);
}

// Submits `requests` as one atomic group; `flights` keep their tensors alive until completion.
std::vector<int64_t> submit_group(std::vector<relax_request_t>& requests, std::vector<std::unique_ptr<InFlight>>& flights,
                                  bool allocating) {
  std::vector<void*> users;
  for (auto& f : flights) users.push_back(f.get());
  std::vector<relax_handle_t> handles(requests.size());
  std::lock_guard<std::mutex> lock(in_flight_mutex());
  if (relax_enqueue_group(requests.data(), static_cast<int32_t>(requests.size()), allocating ? allocate : nullptr,
                          nullptr, users.data(), handles.data()) != RELAX_OK) {
    raise_submit_error();
  }
  for (size_t i = 0; i < handles.size(); ++i) in_flight().emplace(handles[i], std::move(flights[i]));
  return std::vector<int64_t>(handles.begin(), handles.end());
}

std::vector<int64_t> grouped_allreduce_async(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
                                             const std::string& name, int64_t op, double prescale, double postscale,
                                             int64_t process_set) {
  TORCH_CHECK(!inputs.empty() && inputs.size() == outputs.size(),
              "relaxlib: grouped_allreduce needs the same non-zero number of inputs and outputs");
  const std::vector<std::string> names = relax::member_names(name, inputs.size());
  std::vector<relax_request_t> requests;
  std::vector<std::unique_ptr<InFlight>> flights;
  checked(RELAX_REQ_ALLREDUCE, names.data(), names.size(), process_set, [&] {
    for (size_t i = 0; i < inputs.size(); ++i) {
      check_tensor(inputs[i], "grouped_allreduce input");
      check_tensor(outputs[i], "grouped_allreduce output");
      // the core refuses an output smaller than the input
      requests.push_back(tensor_request(RELAX_REQ_ALLREDUCE, inputs[i], names[i], process_set)
                             .output(outputs[i].data_ptr(), capacity(outputs[i]))
                             .reduce(static_cast<int32_t>(op), prescale, postscale)
                             .get());
      flights.push_back(std::make_unique<InFlight>(InFlight{inputs[i], outputs[i], inputs[i].scalar_type()}));
    }
  });
  return submit_group(requests, flights, false);
}

// Grouped ops whose outputs the engine allocates (allgather, reducescatter).
std::vector<int64_t> grouped_allocating_async(int32_t type, const std::vector<at::Tensor>& inputs,
                                              const std::string& name, int64_t op, double prescale, double postscale,
                                              int64_t process_set) {
  TORCH_CHECK(!inputs.empty(), "relaxlib: a grouped ", type == RELAX_REQ_ALLGATHER ? "allgather" : "reducescatter",
              " needs at least one tensor");
  const std::vector<std::string> names = relax::member_names(name, inputs.size());
  std::vector<relax_request_t> requests;
  std::vector<std::unique_ptr<InFlight>> flights;
  checked(type, names.data(), names.size(), process_set, [&] {
    for (size_t i = 0; i < inputs.size(); ++i) {
      check_tensor(inputs[i], "grouped input");
      // allgather has no reduction: reduce() leaves it alone
      requests.push_back(
          tensor_request(type, inputs[i], names[i], process_set).reduce(static_cast<int32_t>(op), prescale, postscale).get());
      flights.push_back(std::make_unique<InFlight>(InFlight{inputs[i], at::Tensor(), inputs[i].scalar_type()}));
    }
  });
  return submit_group(requests, flights, true);
}

std::vector<int64_t> grouped_allgather_async(const std::vector<at::Tensor>& inputs, const std::string& name,
                                             int64_t process_set) {
  return grouped_allocating_async(RELAX_REQ_ALLGATHER, inputs, name, RELAX_OP_SUM, 1.0, 1.0, process_set);
}

std::vector<int64_t> grouped_reducescatter_async(const std::vector<at::Tensor>& inputs, const std::string& name,
                                                 int64_t op, double prescale, double postscale, int64_t process_set) {
  return grouped_allocating_async(RELAX_REQ_REDUCESCATTER, inputs, name, op, prescale, postscale, process_set);
}

relax_request_t allgather_request(const at::Tensor& input, const std::string& name, int64_t process_set) {
  return checked(RELAX_REQ_ALLGATHER, &name, 1, process_set, [&] {
    check_tensor(input, "allgather input");
    return tensor_request(RELAX_REQ_ALLGATHER, input, name, process_set).get();
  });
}

int64_t allgather_async(const at::Tensor& input, const std::string& name, int64_t process_set) {
  relax_request_t r = allgather_request(input, name, process_set);
  return submit(r, std::make_unique<InFlight>(InFlight{input, at::Tensor(), input.scalar_type()}), true);
}

int64_t broadcast_async(const at::Tensor& input, const at::Tensor& output, int64_t root_rank, const std::string& name,
                        int64_t process_set) {
  const relax_request_t r = checked(RELAX_REQ_BROADCAST, &name, 1, process_set, [&] {
    return same_shape_request(RELAX_REQ_BROADCAST, "broadcast", input, output, name, process_set)
        .root(static_cast<int32_t>(root_rank))
        .get();
  });
  return submit(r, std::make_unique<InFlight>(InFlight{input, output, input.scalar_type()}), false);
}

relax_request_t reducescatter_request(const at::Tensor& input, const std::string& name, int64_t op, double prescale,
                                      double postscale, int64_t process_set) {
  return checked(RELAX_REQ_REDUCESCATTER, &name, 1, process_set, [&] {
    check_tensor(input, "reducescatter input");
    // ncounts 0 / recv_counts NULL: split dim 0 evenly
    return tensor_request(RELAX_REQ_REDUCESCATTER, input, name, process_set)
        .reduce(static_cast<int32_t>(op), prescale, postscale)
        .get();
  });
}

int64_t reducescatter_async(const at::Tensor& input, const std::string& name, int64_t op, double prescale,
                            double postscale, int64_t process_set) {
  const relax_request_t r = reducescatter_request(input, name, op, prescale, postscale, process_set);
  return submit(r, std::make_unique<InFlight>(InFlight{input, at::Tensor(), input.scalar_type()}), true);
}

// One reducescatter of `inputs` laid end to end (all contiguous, CPU, of one dtype), each read
// where it lies: this rank receives its 1-D block of the concatenation.
int64_t reducescatter_concatenated_async(const std::vector<at::Tensor>& inputs, const std::string& name, int64_t op,
                                         double prescale, double postscale, int64_t process_set) {
  std::optional<LaidEndToEnd> laid;
  const relax_request_t r = checked(RELAX_REQ_REDUCESCATTER, &name, 1, process_set, [&] {
    laid.emplace(inputs, "reducescatter");
    relax::RequestBuilder request(RELAX_REQ_REDUCESCATTER, name.c_str(), static_cast<int32_t>(process_set));
    laid->describe(request, to_relax_dtype(inputs.front().scalar_type()));
    return request.reduce(static_cast<int32_t>(op), prescale, postscale).get();
  });
  auto flight = std::make_unique<InFlight>(InFlight{inputs.front(), at::Tensor(), inputs.front().scalar_type()});
  flight->keep.assign(inputs.begin() + 1, inputs.end());
  return submit(r, std::move(flight), true);
}

int64_t alltoall_async(const at::Tensor& input, const std::vector<int64_t>& splits, const std::string& name,
                       int64_t process_set) {
  const relax_request_t r = checked(RELAX_REQ_ALLTOALL, &name, 1, process_set, [&] {
    check_tensor(input, "alltoall input");
    return tensor_request(RELAX_REQ_ALLTOALL, input, name, process_set)
        .splits(static_cast<int32_t>(splits.size()), splits.data())
        .get();
  });
  return submit(r, std::make_unique<InFlight>(InFlight{input, at::Tensor(), input.scalar_type()}), true);
}

// Raises the failure of a request that relax_run ran (status != 0) and releases its handle.
void finish_run(int status, relax_handle_t h) {
  if (h == 0) raise_submit_error();
  const std::string text = status != 0 ? relax_handle_message(h) : "";
  relax_release(h);
  TORCH_CHECK(status == 0, "[relaxlib:", status, "] ", text);
}

// relax_run in slices of kWaitSliceMs with the interrupt check between them. If the check
// throws, `flight` (the request's buffers) is kept alive for the engine and the exception
// propagates: Ctrl-C reaches Python while a peer has not submitted. A request whose only state
// is the caller's `input` and `output` passes no flight: one is made only if the wait is abandoned.
int run_interruptibly(const relax_request_t& r, relax_alloc_fn alloc, std::unique_ptr<InFlight>& flight,
                      relax_handle_t* h, const at::Tensor* input = nullptr, const at::Tensor* output = nullptr) {
  int status = relax_run_for(&r, alloc, flight.get(), h, kWaitSliceMs);
  while (status == RELAX_PENDING) {
    if (const InterruptCheck check = g_interrupt_check.load()) {
      try {
        check();
      } catch (...) {
        if (!flight) flight = std::make_unique<InFlight>(InFlight{*input, *output, input->scalar_type()});
        std::lock_guard<std::mutex> lock(in_flight_mutex());
        g_abandoned.push_back(std::move(flight));
        throw;
      }
    }
    status = relax_wait_for(*h, kWaitSliceMs);
  }
  return status;
}

at::Tensor run_allocating(const relax_request_t& r, const at::Tensor& input) {
  auto flight = std::make_unique<InFlight>(InFlight{input, at::Tensor(), input.scalar_type()});
  relax_handle_t h = 0;
  const int status = run_interruptibly(r, allocate, flight, &h);
  finish_run(status, h);
  return flight->output;
}

int64_t control_async(int32_t type, const std::string& name, int64_t process_set) {
  const relax::RequestBuilder r(type, name.c_str(), static_cast<int32_t>(process_set));
  return submit(r.get(), std::make_unique<InFlight>(InFlight{at::Tensor(), at::Tensor(), at::kFloat}), false);
}

int64_t barrier_async(const std::string& name, int64_t process_set) {
  return control_async(RELAX_REQ_BARRIER, name, process_set);
}

int64_t join_async() { return control_async(RELAX_REQ_JOIN, "join", 0); }

bool poll(int64_t handle) {
  const int p = relax_poll(handle);
  TORCH_CHECK(p >= 0, "relaxlib: unknown handle ", handle);
  return p == 1;
}

// Waits (the GIL is released by the dispatcher) and returns the status code; 0 = success.
int64_t wait(int64_t handle) { return relax_wait(handle); }

// Runs the rounds of a request about to be waited for on this thread (relax_drive).
void drive(int64_t handle) { relax_drive(handle); }

// wait() for at most timeout_ms: RELAX_PENDING if not complete (Python waits in such slices).
int64_t wait_for(int64_t handle, int64_t timeout_ms) {
  return relax_wait_for(handle, static_cast<int32_t>(timeout_ms));
}

std::string message(int64_t handle) { return relax_handle_message(handle); }

int64_t result(int64_t handle) { return relax_handle_result(handle); }

at::Tensor output(int64_t handle) {
  std::lock_guard<std::mutex> lock(in_flight_mutex());
  auto it = in_flight().find(handle);
  TORCH_CHECK(it != in_flight().end(), "relaxlib: unknown handle ", handle);
  return it->second->output;
}

std::vector<int64_t> received_splits(int64_t handle) {
  std::vector<int64_t> splits(1024);
  const int n = relax_handle_received_splits(handle, splits.data(), static_cast<int32_t>(splits.size()));
  if (n > static_cast<int>(splits.size())) {
    splits.resize(static_cast<size_t>(n));
    relax_handle_received_splits(handle, splits.data(), n);
  }
  splits.resize(static_cast<size_t>(std::max(n, 0)));
  return splits;
}

void release(int64_t handle) {
  std::unique_ptr<InFlight> flight;
  {
    std::lock_guard<std::mutex> lock(in_flight_mutex());
    auto it = in_flight().find(handle);
    if (it != in_flight().end()) {
      flight = std::move(it->second);
      in_flight().erase(it);
    }
  }
  relax_release(handle);
}

}  // namespace

// Synchronous collectives: what hvd.allreduce(_), hvd.allgather and hvd.reducescatter run, through
// the direct bindings in python_bindings.cc (torch.ops.relaxlib.* registers them as well).
// relax_run lets this thread negotiate and run the collective itself while the engine thread is
// idle (no hand-off, no wake-up). The caller holds the tensors (and the in-flight record, which
// receives an allocated output) for the whole call. Errors carry the "[relaxlib:<code>]" prefix,
// as submission errors do.
void set_interrupt_check(InterruptCheck check) { g_interrupt_check.store(check); }

void allreduce_sync(const at::Tensor& input, const at::Tensor& output, const std::string& name, int64_t op,
                    double prescale, double postscale, int64_t process_set) {
  const relax_request_t r = allreduce_request(input, output, name, op, prescale, postscale, process_set);
  std::unique_ptr<InFlight> flight;
  relax_handle_t h = 0;
  const int status = run_interruptibly(r, nullptr, flight, &h, &input, &output);
  finish_run(status, h);
}

at::Tensor allgather_sync(const at::Tensor& input, const std::string& name, int64_t process_set) {
  return run_allocating(allgather_request(input, name, process_set), input);
}

at::Tensor reducescatter_sync(const at::Tensor& input, const std::string& name, int64_t op, double prescale,
                              double postscale, int64_t process_set) {
  return run_allocating(reducescatter_request(input, name, op, prescale, postscale, process_set), input);
}

}  // namespace relaxlib_torch

TORCH_LIBRARY(relaxlib, m) {
  m.def("allreduce_async(Tensor input, Tensor(a!) output, str name, int op, float prescale, float postscale, "
        "int process_set) -> int",
        relaxlib_torch::allreduce_async);
  m.def("allreduce_sync(Tensor input, Tensor(a!) output, str name, int op, float prescale, float postscale, "
        "int process_set) -> ()",
        relaxlib_torch::allreduce_sync);
  m.def("allgather_sync(Tensor input, str name, int process_set) -> Tensor", relaxlib_torch::allgather_sync);
  m.def("reducescatter_sync(Tensor input, str name, int op, float prescale, float postscale, int process_set) "
        "-> Tensor",
        relaxlib_torch::reducescatter_sync);
  m.def("grouped_allreduce_async(Tensor[] inputs, Tensor(a!)[] outputs, str name, int op, float prescale, "
        "float postscale, int process_set) -> int[]",
        relaxlib_torch::grouped_allreduce_async);
  m.def("allgather_async(Tensor input, str name, int process_set) -> int", relaxlib_torch::allgather_async);
  m.def("grouped_allgather_async(Tensor[] inputs, str name, int process_set) -> int[]", relaxlib_torch::grouped_allgather_async);
  m.def("grouped_reducescatter_async(Tensor[] inputs, str name, int op, float prescale, float postscale, "
        "int process_set) -> int[]",
        relaxlib_torch::grouped_reducescatter_async);
  m.def("broadcast_async(Tensor input, Tensor(a!) output, int root_rank, str name, int process_set) -> int",
        relaxlib_torch::broadcast_async);
  m.def("reducescatter_async(Tensor input, str name, int op, float prescale, float postscale, int process_set) -> int",
        relaxlib_torch::reducescatter_async);
  m.def("reducescatter_concatenated_async(Tensor[] inputs, str name, int op, float prescale, float postscale, "
        "int process_set) -> int",
        relaxlib_torch::reducescatter_concatenated_async);
  m.def("alltoall_async(Tensor input, int[] splits, str name, int process_set) -> int", relaxlib_torch::alltoall_async);
  m.def("barrier_async(str name, int process_set) -> int", relaxlib_torch::barrier_async);
  m.def("join_async() -> int", relaxlib_torch::join_async);
  m.def("poll(int handle) -> bool", relaxlib_torch::poll);
  m.def("wait(int handle) -> int", relaxlib_torch::wait);
  m.def("drive(int handle) -> ()", relaxlib_torch::drive);
  m.def("wait_for(int handle, int timeout_ms) -> int", relaxlib_torch::wait_for);
  m.def("message(int handle) -> str", relaxlib_torch::message);
  m.def("result(int handle) -> int", relaxlib_torch::result);
  m.def("output(int handle) -> Tensor", relaxlib_torch::output);
  m.def("received_splits(int handle) -> int[]", relaxlib_torch::received_splits);
  m.def("release(int handle) -> ()", relaxlib_torch::release);
}
