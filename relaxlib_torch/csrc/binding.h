// The torch binding's request plumbing, shared by its entry points (ops.cc: the collectives,
// compressed_ops.cc: the compressed all-reduce): tensor checks, requests built from tensors
// (relax/request_builder.h), submission, and the in-flight records that keep a request's tensors
// alive until it completes. Only the C ABI (relax/relax.h) is called.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "relax/relax.h"
#include "relax/request_builder.h"

namespace relaxlib_torch {

// What a submitted request needs kept alive until it completes: the tensors, and for ops whose
// output shape is decided by the engine, the dtype to allocate with.
struct InFlight {
  at::Tensor input;
  at::Tensor output;
  c10::ScalarType dtype;
  std::vector<at::Tensor> keep;  // further tensors the engine writes (error-feedback state)
};

// The records of submitted requests by handle, and the mutex guarding them.
std::mutex& in_flight_mutex();
std::unordered_map<int64_t, std::unique_ptr<InFlight>>& in_flight();

int32_t to_relax_dtype(c10::ScalarType t);
// A CPU, contiguous tensor of a supported dtype; else a c10::Error naming `what`.
void check_tensor(const at::Tensor& t, const char* what);

// The capacity in bytes of a tensor's buffer, which every buffer handed to the core travels with:
// the core refuses a request whose buffers are smaller than what it reads or writes (relax.h,
// "Buffer capacities"), so the binding needs no size checks of its own.
inline int64_t capacity(const at::Tensor& t) { return static_cast<int64_t>(t.nbytes()); }

// relax_alloc_fn: the output of an InFlight (`user`), from the output cache.
void* allocate(void* user, int32_t ndim, const int64_t* shape);

// A request of `type` for `input` (dtype, shape, buffer), its arguments at their defaults. The
// name and the tensor must outlive the submission.
relax::RequestBuilder tensor_request(int32_t type, const at::Tensor& input, const std::string& name,
                                     int64_t process_set);

// The request of an op that writes an output shaped like its input (allreduce, broadcast,
// compressed all-reduce), after the binding's checks of both tensors.
relax::RequestBuilder same_shape_request(int32_t type, const char* what, const at::Tensor& input,
                                         const at::Tensor& output, const std::string& name, int64_t process_set);

// Raises the last submission error with the "[relaxlib:<code>]" prefix the Python layer maps.
[[noreturn]] void raise_submit_error();

// Submits one request; `flight` is registered under its handle before the engine can complete it.
int64_t submit(const relax_request_t& request, std::unique_ptr<InFlight> flight, bool allocating);

// The binding's own checks (device, layout, dtype, output shape) reject a request before the core
// sees it. This announces such a rejection to the other members (relax_reject), so that a
// rank-dependent mistake fails them in the round they submit instead of leaving them waiting; the
// core announces the rejections it makes itself.
void announce_rejection(int32_t type, const std::string* names, size_t count, int64_t process_set,
                        const std::string& why);

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

// Tensors laid end to end as one request's input (relax_input_pieces_t): their pointers and
// element counts, which must outlive relax_enqueue, and their total.
struct LaidEndToEnd {
  std::vector<const void*> pointers;
  std::vector<int64_t> counts;
  int64_t total = 0;

  // Checks `inputs` (at least one; contiguous CPU tensors of one dtype) and records them.
  LaidEndToEnd(const std::vector<at::Tensor>& inputs, const char* what);

  // Sets them as the request's input (its flat shape and pieces).
  void describe(relax::RequestBuilder& r, int32_t dtype) const {
    r.pieces(dtype, static_cast<int32_t>(pointers.size()), pointers.data(), counts.data(), &total);
  }
};

}  // namespace relaxlib_torch
