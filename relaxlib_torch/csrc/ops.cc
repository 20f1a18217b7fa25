// PyTorch glue: registers torch.ops.relaxlib.* and converts tensors to core requests.
// Only the C ABI (relax/relax.h) is called; no MPI, no algorithm logic lives here.
#include <ATen/ATen.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "output_cache.h"
#include "relax/relax.h"
#include "sync_ops.h"

namespace {

// What a submitted request needs kept alive until it completes: the tensors, and for ops whose
// output shape is decided by the engine, the dtype to allocate with.
struct InFlight {
  at::Tensor input;
  at::Tensor output;
  c10::ScalarType dtype;
  std::vector<at::Tensor> keep;  // further tensors the engine writes (error-feedback state)
};

std::mutex g_mutex;
std::unordered_map<int64_t, std::unique_ptr<InFlight>> g_in_flight;
// Synchronous requests whose caller was interrupted: still pending in the engine, which may
// write their buffers until they complete, so they are kept for the life of the process.
std::vector<std::unique_ptr<InFlight>> g_abandoned;
std::atomic<relaxlib_torch::InterruptCheck> g_interrupt_check{nullptr};
constexpr int32_t kWaitSliceMs = 50;

int32_t to_relax_dtype(c10::ScalarType t) {
  switch (t) {
    case at::kFloat: return RELAX_FLOAT32;
    case at::kDouble: return RELAX_FLOAT64;
    case at::kHalf: return RELAX_FLOAT16;
    case at::kBFloat16: return RELAX_BFLOAT16;
    case at::kInt: return RELAX_INT32;
    case at::kLong: return RELAX_INT64;
    case at::kByte: return RELAX_UINT8;
    case at::kChar: return RELAX_INT8;
    case at::kBool: return RELAX_BOOL;
    case at::kShort: return RELAX_INT16;
    case at::kUInt16: return RELAX_UINT16;
    default:
      TORCH_CHECK_TYPE(false, "relaxlib does not support tensors of type ", t,
                       "; supported: float32, float64, float16, bfloat16, int64, int32, int16, int8, uint16, uint8 "
                       "(bool for broadcast/allgather/alltoall)");
  }
}

void check_tensor(const at::Tensor& t, const char* what) {
  TORCH_CHECK(t.device().is_cpu(), "relaxlib: ", what, " must be a CPU tensor (this build has no GPU support), got ",
              t.device());
  TORCH_CHECK(t.is_contiguous(), "relaxlib: ", what, " must be contiguous");
  (void)to_relax_dtype(t.scalar_type());
}

// The capacity in bytes of a tensor's buffer, which every buffer handed to the core travels with:
// the core refuses a request whose buffers are smaller than what it reads or writes (relax.h,
// "Buffer capacities"), so the binding needs no size checks of its own.
int64_t capacity(const at::Tensor& t) { return static_cast<int64_t>(t.nbytes()); }

void* allocate(void* user, int32_t ndim, const int64_t* shape) {
  auto* f = static_cast<InFlight*>(user);
  f->output = relaxlib_torch::OutputCache::instance().empty(at::IntArrayRef(shape, static_cast<size_t>(ndim)), f->dtype);
  return f->output.data_ptr();
}

void default_reduce_args(relax_reduce_args_t& a) {
  a.reduce_op = RELAX_OP_AVERAGE;
  a.prescale = 1.0;
  a.postscale = 1.0;
}

// A request of `type` with every argument of its kind at its default: zero, except no scaling
// for the reductions and the compressed all-reduce's input scale. (`relax_request_t r{}` only
// zeroes the union's first member.)
relax_request_t empty_request(int32_t type, const std::string& name, int64_t process_set) {
  relax_request_t r;
  std::memset(&r, 0, sizeof r);
  r.type = type;
  r.name = name.c_str();
  r.process_set = static_cast<int32_t>(process_set);
  if (type == RELAX_REQ_ALLREDUCE) default_reduce_args(r.args.allreduce);
  if (type == RELAX_REQ_REDUCESCATTER) default_reduce_args(r.args.reducescatter.reduce);
  if (type == RELAX_REQ_COMPRESSED_ALLREDUCE) r.args.compressed_allreduce.prescale = 1.0;
  return r;
}

// The reduction arguments of an allreduce or reducescatter request.
relax_reduce_args_t& reduce_args(relax_request_t& r) {
  TORCH_CHECK(r.type == RELAX_REQ_ALLREDUCE || r.type == RELAX_REQ_REDUCESCATTER,
              "relaxlib: internal error: request type ", r.type, " has no reduction arguments");
  return r.type == RELAX_REQ_ALLREDUCE ? r.args.allreduce : r.args.reducescatter.reduce;
}

void set_reduce_args(relax_request_t& r, int64_t op, double prescale, double postscale) {
  relax_reduce_args_t& a = reduce_args(r);
  a.reduce_op = static_cast<int32_t>(op);
  a.prescale = prescale;
  a.postscale = postscale;
}

relax_request_t base_request(int32_t type, const at::Tensor& input, const std::string& name, int64_t process_set) {
  relax_request_t r = empty_request(type, name, process_set);
  r.dtype = to_relax_dtype(input.scalar_type());
  r.ndim = static_cast<int32_t>(input.dim());
  r.shape = input.sizes().data();
  r.input = input.data_ptr();
  r.input_bytes = capacity(input);
  return r;
}

[[noreturn]] void raise_submit_error() {
  // The Python layer maps the "[relaxlib:<code>]" prefix to its exception classes.
  TORCH_CHECK(false, "[relaxlib:", relax_last_error_code(), "] ", relax_last_error());
}

int64_t submit(const relax_request_t& request, std::unique_ptr<InFlight> flight, bool allocating) {
  std::lock_guard<std::mutex> lock(g_mutex);  // the handle must be registered before the engine can complete it
  const relax_handle_t h = relax_enqueue(&request, allocating ? allocate : nullptr, nullptr, flight.get());
  if (h == 0) raise_submit_error();
  g_in_flight.emplace(h, std::move(flight));
  return h;
}

// The binding's own checks (device, layout, dtype, output shape) reject a request before the core
// sees it. This announces such a rejection to the other members (relax_reject), so that a
// rank-dependent mistake fails them in the round they submit instead of leaving them waiting; the
// core announces the rejections it makes itself.
void announce_rejection(int32_t type, const std::string* names, size_t count, int64_t process_set,
                        const std::string& why) {
  std::vector<relax_request_t> skeletons;
  for (size_t i = 0; i < count; ++i) skeletons.push_back(empty_request(type, names[i], process_set));
  (void)relax_reject(skeletons.data(), static_cast<int32_t>(skeletons.size()), RELAX_ERR_INVALID_ARGUMENT,
                     why.c_str());  // best effort: the caller raises the binding's own error regardless
}

// Runs `build` (the binding's checks and conversions of one request, or of a group of `count`
// named names[0..count)); if it throws, announces the rejection first. Nothing is copied unless
// it throws: this wraps every collective.
template <typename Build>
auto checked(int32_t type, const std::string* names, size_t count, int64_t process_set, Build&& build)
    -> decltype(build()) {
  try {
    return build();
  } catch (const c10::Error& e) {
    announce_rejection(type, names, count, process_set, e.what_without_backtrace());
    throw;
  } catch (const std::exception& e) {
    announce_rejection(type, names, count, process_set, e.what());
    throw;
  }
}

// The request of an op that writes an output shaped like its input (allreduce, broadcast,
// compressed all-reduce), after the binding's checks of both tensors.
relax_request_t same_shape_request(int32_t type, const char* what, const at::Tensor& input, const at::Tensor& output,
                                   const std::string& name, int64_t process_set) {
  check_tensor(input, what);
  check_tensor(output, what);
  TORCH_CHECK(output.sizes() == input.sizes() && output.scalar_type() == input.scalar_type(), "relaxlib: ", what,
              " output must match the input's shape and dtype");
  relax_request_t r = base_request(type, input, name, process_set);
  r.output = output.data_ptr();
  r.output_bytes = capacity(output);
  return r;
}

relax_request_t allreduce_request(const at::Tensor& input, const at::Tensor& output, const std::string& name,
                                  int64_t op, double prescale, double postscale, int64_t process_set) {
  relax_request_t r = checked(RELAX_REQ_ALLREDUCE, &name, 1, process_set, [&] {
    return same_shape_request(RELAX_REQ_ALLREDUCE, "allreduce", input, output, name, process_set);
  });
  set_reduce_args(r, op, prescale, postscale);
  return r;
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
  std::lock_guard<std::mutex> lock(g_mutex);
  if (relax_enqueue_group(requests.data(), static_cast<int32_t>(requests.size()), allocating ? allocate : nullptr,
                          nullptr, users.data(), handles.data()) != RELAX_OK) {
    raise_submit_error();
  }
  for (size_t i = 0; i < handles.size(); ++i) g_in_flight.emplace(handles[i], std::move(flights[i]));
  return std::vector<int64_t>(handles.begin(), handles.end());
}

std::vector<std::string> member_names(const std::string& name, size_t count) {
  std::vector<std::string> names;
  for (size_t i = 0; i < count; ++i) names.push_back(name + "." + std::to_string(i) + "of" + std::to_string(count));
  return names;
}

std::vector<int64_t> grouped_allreduce_async(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs,
                                             const std::string& name, int64_t op, double prescale, double postscale,
                                             int64_t process_set) {
  TORCH_CHECK(!inputs.empty() && inputs.size() == outputs.size(),
              "relaxlib: grouped_allreduce needs the same non-zero number of inputs and outputs");
  const std::vector<std::string> names = member_names(name, inputs.size());
  std::vector<relax_request_t> requests;
  std::vector<std::unique_ptr<InFlight>> flights;
  checked(RELAX_REQ_ALLREDUCE, names.data(), names.size(), process_set, [&] {
    for (size_t i = 0; i < inputs.size(); ++i) {
      check_tensor(inputs[i], "grouped_allreduce input");
      check_tensor(outputs[i], "grouped_allreduce output");
      relax_request_t r = base_request(RELAX_REQ_ALLREDUCE, inputs[i], names[i], process_set);
      r.output = outputs[i].data_ptr();
      r.output_bytes = capacity(outputs[i]);  // the core refuses an output smaller than the input
      set_reduce_args(r, op, prescale, postscale);
      requests.push_back(r);
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
  const std::vector<std::string> names = member_names(name, inputs.size());
  std::vector<relax_request_t> requests;
  std::vector<std::unique_ptr<InFlight>> flights;
  checked(type, names.data(), names.size(), process_set, [&] {
    for (size_t i = 0; i < inputs.size(); ++i) {
      check_tensor(inputs[i], "grouped input");
      relax_request_t r = base_request(type, inputs[i], names[i], process_set);
      if (type == RELAX_REQ_REDUCESCATTER) set_reduce_args(r, op, prescale, postscale);  // allgather: none
      requests.push_back(r);
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
    return base_request(RELAX_REQ_ALLGATHER, input, name, process_set);
  });
}

int64_t allgather_async(const at::Tensor& input, const std::string& name, int64_t process_set) {
  relax_request_t r = allgather_request(input, name, process_set);
  return submit(r, std::make_unique<InFlight>(InFlight{input, at::Tensor(), input.scalar_type()}), true);
}

int64_t broadcast_async(const at::Tensor& input, const at::Tensor& output, int64_t root_rank, const std::string& name,
                        int64_t process_set) {
  relax_request_t r = checked(RELAX_REQ_BROADCAST, &name, 1, process_set, [&] {
    return same_shape_request(RELAX_REQ_BROADCAST, "broadcast", input, output, name, process_set);
  });
  r.args.broadcast.root_rank = static_cast<int32_t>(root_rank);
  return submit(r, std::make_unique<InFlight>(InFlight{input, output, input.scalar_type()}), false);
}

relax_request_t reducescatter_request(const at::Tensor& input, const std::string& name, int64_t op, double prescale,
                                      double postscale, int64_t process_set) {
  relax_request_t r = checked(RELAX_REQ_REDUCESCATTER, &name, 1, process_set, [&] {
    check_tensor(input, "reducescatter input");
    return base_request(RELAX_REQ_REDUCESCATTER, input, name, process_set);
  });
  set_reduce_args(r, op, prescale, postscale);  // ncounts 0 / recv_counts NULL: split dim 0 evenly
  return r;
}

int64_t reducescatter_async(const at::Tensor& input, const std::string& name, int64_t op, double prescale,
                            double postscale, int64_t process_set) {
  const relax_request_t r = reducescatter_request(input, name, op, prescale, postscale, process_set);
  return submit(r, std::make_unique<InFlight>(InFlight{input, at::Tensor(), input.scalar_type()}), true);
}

// Tensors laid end to end as one request's input (relax_input_pieces_t): their pointers and
// element counts, which must outlive relax_enqueue, and their total.
struct LaidEndToEnd {
  std::vector<const void*> pointers;
  std::vector<int64_t> counts;
  int64_t total = 0;

  // Checks `inputs` (at least one; contiguous CPU tensors of one dtype) and records them.
  LaidEndToEnd(const std::vector<at::Tensor>& inputs, const char* what) {
    TORCH_CHECK(!inputs.empty(), "relaxlib: a ", what, " of tensors laid end to end needs at least one tensor");
    for (const at::Tensor& input : inputs) {
      check_tensor(input, what);
      TORCH_CHECK(input.scalar_type() == inputs.front().scalar_type(), "relaxlib: tensors laid end to end in a ",
                  what, " must share a dtype, got ", inputs.front().scalar_type(), " and ", input.scalar_type());
      pointers.push_back(input.data_ptr());
      counts.push_back(input.numel());
      total += input.numel();
    }
  }

  // The request's flat shape and pieces.
  void describe(relax_request_t& r, relax_input_pieces_t& pieces) {
    r.ndim = 1;
    r.shape = &total;
    pieces = {static_cast<int32_t>(pointers.size()), pointers.data(), counts.data()};
  }
};

// One reducescatter of `inputs` laid end to end (all contiguous, CPU, of one dtype), each read
// where it lies: this rank receives its 1-D block of the concatenation.
int64_t reducescatter_concatenated_async(const std::vector<at::Tensor>& inputs, const std::string& name, int64_t op,
                                         double prescale, double postscale, int64_t process_set) {
  std::optional<LaidEndToEnd> laid;
  relax_request_t r = checked(RELAX_REQ_REDUCESCATTER, &name, 1, process_set, [&] {
    laid.emplace(inputs, "reducescatter");
    relax_request_t request = empty_request(RELAX_REQ_REDUCESCATTER, name, process_set);
    request.dtype = to_relax_dtype(inputs.front().scalar_type());
    return request;
  });
  laid->describe(r, r.args.reducescatter.inputs);
  set_reduce_args(r, op, prescale, postscale);
  auto flight = std::make_unique<InFlight>(InFlight{inputs.front(), at::Tensor(), inputs.front().scalar_type()});
  flight->keep.assign(inputs.begin() + 1, inputs.end());
  return submit(r, std::move(flight), true);
}

int64_t alltoall_async(const at::Tensor& input, const std::vector<int64_t>& splits, const std::string& name,
                       int64_t process_set) {
  relax_request_t r = checked(RELAX_REQ_ALLTOALL, &name, 1, process_set, [&] {
    check_tensor(input, "alltoall input");
    return base_request(RELAX_REQ_ALLTOALL, input, name, process_set);
  });
  r.args.alltoall.nsplits = static_cast<int32_t>(splits.size());
  r.args.alltoall.splits = splits.empty() ? nullptr : splits.data();
  return submit(r, std::make_unique<InFlight>(InFlight{input, at::Tensor(), input.scalar_type()}), true);
}

// A compressed all-reduce's codec, reduction and input scale, and its error-feedback states kept
// alive by `flight` (their sizes are checked by the core against the tensor and the set's chunk).
void set_compressed_args(relax_request_t& r, InFlight& flight,
                         const std::optional<at::Tensor>& worker_error, const std::optional<at::Tensor>& owner_error,
                         int64_t codec, int64_t op, double prescale) {
  relax_compressed_allreduce_args_t& args = r.args.compressed_allreduce;
  args.reduce_op = static_cast<int32_t>(op);
  args.codec = static_cast<int32_t>(codec);
  args.prescale = prescale;
  if (worker_error && worker_error->defined()) {
    check_tensor(*worker_error, "worker error state");
    TORCH_CHECK(worker_error->scalar_type() == at::kFloat, "relaxlib: the worker error state must be float32");
    args.worker_error = worker_error->data_ptr<float>();
    args.worker_error_bytes = capacity(*worker_error);  // its size is the core's to check (one rule)
    flight.keep.push_back(*worker_error);
  }
  if (owner_error && owner_error->defined()) {
    check_tensor(*owner_error, "owner error state");
    TORCH_CHECK(owner_error->scalar_type() == at::kFloat, "relaxlib: the owner error state must be float32");
    args.owner_error = owner_error->data_ptr<float>();
    args.owner_error_bytes = capacity(*owner_error);  // the core knows the set's chunk and checks it
    flight.keep.push_back(*owner_error);
  }
}

int64_t compressed_allreduce_async(const at::Tensor& input, const std::optional<at::Tensor>& out,
                                   const std::optional<at::Tensor>& worker_error,
                                   const std::optional<at::Tensor>& owner_error, const std::string& name, int64_t codec,
                                   int64_t op, int64_t process_set, double prescale) {
  relax_request_t r = empty_request(RELAX_REQ_COMPRESSED_ALLREDUCE, name, process_set);
  std::unique_ptr<InFlight> flight;
  checked(RELAX_REQ_COMPRESSED_ALLREDUCE, &name, 1, process_set, [&] {
    check_tensor(input, "compressed_allreduce input");
    // Without an output, one comes from the output cache (fresh large buffers cost page faults).
    const at::Tensor output =
        out && out->defined() ? *out : relaxlib_torch::OutputCache::instance().empty(input.sizes(), input.scalar_type());
    r = same_shape_request(RELAX_REQ_COMPRESSED_ALLREDUCE, "compressed_allreduce", input, output, name, process_set);
    flight = std::make_unique<InFlight>(InFlight{input, output, input.scalar_type()});
    set_compressed_args(r, *flight, worker_error, owner_error, codec, op, prescale);
  });
  return submit(r, std::move(flight), false);
}

// The compressed all-reduce of float32 tensors laid end to end, each read where it lies; the
// result is one flat tensor.
int64_t compressed_allreduce_concatenated_async(const std::vector<at::Tensor>& inputs,
                                                const std::optional<at::Tensor>& worker_error,
                                                const std::optional<at::Tensor>& owner_error, const std::string& name,
                                                int64_t codec, int64_t op, int64_t process_set, double prescale) {
  relax_request_t r = empty_request(RELAX_REQ_COMPRESSED_ALLREDUCE, name, process_set);
  std::optional<LaidEndToEnd> laid;
  std::unique_ptr<InFlight> flight;
  checked(RELAX_REQ_COMPRESSED_ALLREDUCE, &name, 1, process_set, [&] {
    laid.emplace(inputs, "compressed_allreduce");
    TORCH_CHECK(inputs.front().scalar_type() == at::kFloat, "relaxlib: compressed_allreduce supports float32 "
                "tensors, got ", inputs.front().scalar_type());
    const at::Tensor output = relaxlib_torch::OutputCache::instance().empty({laid->total}, at::kFloat);
    flight = std::make_unique<InFlight>(InFlight{inputs.front(), output, at::kFloat});
    flight->keep.assign(inputs.begin() + 1, inputs.end());
    r.dtype = RELAX_FLOAT32;
    r.output = output.data_ptr();
    r.output_bytes = capacity(output);
    set_compressed_args(r, *flight, worker_error, owner_error, codec, op, prescale);
  });
  laid->describe(r, r.args.compressed_allreduce.inputs);
  return submit(r, std::move(flight), false);
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
    if (const relaxlib_torch::InterruptCheck check = g_interrupt_check.load()) {
      try {
        check();
      } catch (...) {
        if (!flight) flight = std::make_unique<InFlight>(InFlight{*input, *output, input->scalar_type()});
        std::lock_guard<std::mutex> lock(g_mutex);
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
  const relax_request_t r = empty_request(type, name, process_set);
  return submit(r, std::make_unique<InFlight>(InFlight{at::Tensor(), at::Tensor(), at::kFloat}), false);
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
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_in_flight.find(handle);
  TORCH_CHECK(it != g_in_flight.end(), "relaxlib: unknown handle ", handle);
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
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_in_flight.find(handle);
    if (it != g_in_flight.end()) {
      flight = std::move(it->second);
      g_in_flight.erase(it);
    }
  }
  relax_release(handle);
}

}  // namespace

namespace relaxlib_torch {

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
        allreduce_async);
  m.def("allreduce_sync(Tensor input, Tensor(a!) output, str name, int op, float prescale, float postscale, "
        "int process_set) -> ()",
        relaxlib_torch::allreduce_sync);
  m.def("allgather_sync(Tensor input, str name, int process_set) -> Tensor", relaxlib_torch::allgather_sync);
  m.def("reducescatter_sync(Tensor input, str name, int op, float prescale, float postscale, int process_set) "
        "-> Tensor",
        relaxlib_torch::reducescatter_sync);
  m.def("grouped_allreduce_async(Tensor[] inputs, Tensor(a!)[] outputs, str name, int op, float prescale, "
        "float postscale, int process_set) -> int[]",
        grouped_allreduce_async);
  m.def("allgather_async(Tensor input, str name, int process_set) -> int", allgather_async);
  m.def("grouped_allgather_async(Tensor[] inputs, str name, int process_set) -> int[]", grouped_allgather_async);
  m.def("grouped_reducescatter_async(Tensor[] inputs, str name, int op, float prescale, float postscale, "
        "int process_set) -> int[]",
        grouped_reducescatter_async);
  m.def("broadcast_async(Tensor input, Tensor(a!) output, int root_rank, str name, int process_set) -> int",
        broadcast_async);
  m.def("reducescatter_async(Tensor input, str name, int op, float prescale, float postscale, int process_set) -> int",
        reducescatter_async);
  m.def("reducescatter_concatenated_async(Tensor[] inputs, str name, int op, float prescale, float postscale, "
        "int process_set) -> int",
        reducescatter_concatenated_async);
  m.def("alltoall_async(Tensor input, int[] splits, str name, int process_set) -> int", alltoall_async);
  m.def("compressed_allreduce_async(Tensor input, Tensor(a!)? output, Tensor(b!)? worker_error, "
        "Tensor(c!)? owner_error, str name, int codec, int op, int process_set, float prescale) -> int",
        compressed_allreduce_async);
  m.def("compressed_allreduce_concatenated_async(Tensor[] inputs, Tensor(a!)? worker_error, Tensor(b!)? owner_error, "
        "str name, int codec, int op, int process_set, float prescale) -> int",
        compressed_allreduce_concatenated_async);
  m.def("barrier_async(str name, int process_set) -> int", barrier_async);
  m.def("join_async() -> int", join_async);
  m.def("poll(int handle) -> bool", poll);
  m.def("wait(int handle) -> int", wait);
  m.def("drive(int handle) -> ()", drive);
  m.def("wait_for(int handle, int timeout_ms) -> int", wait_for);
  m.def("message(int handle) -> str", message);
  m.def("result(int handle) -> int", result);
  m.def("output(int handle) -> Tensor", output);
  m.def("received_splits(int handle) -> int[]", received_splits);
  m.def("release(int handle) -> ()", release);
}
