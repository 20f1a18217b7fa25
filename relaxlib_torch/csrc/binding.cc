// The torch binding's request plumbing (see binding.h).
#include "binding.h"

#include <torch/library.h>

#include "output_cache.h"

namespace relaxlib_torch {

std::mutex& in_flight_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::unordered_map<int64_t, std::unique_ptr<InFlight>>& in_flight() {
  static std::unordered_map<int64_t, std::unique_ptr<InFlight>> records;
  return records;
}

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

void* allocate(void* user, int32_t ndim, const int64_t* shape) {
  auto* f = static_cast<InFlight*>(user);
  f->output = OutputCache::instance().empty(at::IntArrayRef(shape, static_cast<size_t>(ndim)), f->dtype);
  return f->output.data_ptr();
}

relax::RequestBuilder tensor_request(int32_t type, const at::Tensor& input, const std::string& name,
                                     int64_t process_set) {
  relax::RequestBuilder r(type, name.c_str(), static_cast<int32_t>(process_set));
  r.tensor(to_relax_dtype(input.scalar_type()), static_cast<int32_t>(input.dim()), input.sizes().data(),
           input.data_ptr(), capacity(input));
  return r;
}

relax::RequestBuilder same_shape_request(int32_t type, const char* what, const at::Tensor& input,
                                         const at::Tensor& output, const std::string& name, int64_t process_set) {
  check_tensor(input, what);
  check_tensor(output, what);
  TORCH_CHECK(output.sizes() == input.sizes() && output.scalar_type() == input.scalar_type(), "relaxlib: ", what,
              " output must match the input's shape and dtype");
  relax::RequestBuilder r = tensor_request(type, input, name, process_set);
  r.output(output.data_ptr(), capacity(output));
  return r;
}

void raise_submit_error() {
  // The Python layer maps the "[relaxlib:<code>]" prefix to its exception classes.
  TORCH_CHECK(false, "[relaxlib:", relax_last_error_code(), "] ", relax_last_error());
}

int64_t submit(const relax_request_t& request, std::unique_ptr<InFlight> flight, bool allocating) {
  std::lock_guard<std::mutex> lock(in_flight_mutex());  // registered before the engine can complete it
  const relax_handle_t h = relax_enqueue(&request, allocating ? allocate : nullptr, nullptr, flight.get());
  if (h == 0) raise_submit_error();
  in_flight().emplace(h, std::move(flight));
  return h;
}

void announce_rejection(int32_t type, const std::string* names, size_t count, int64_t process_set,
                        const std::string& why) {
  // best effort: the caller raises the binding's own error regardless
  (void)relax::announce_rejection(type, std::vector<std::string>(names, names + count),
                                  static_cast<int32_t>(process_set), why);
}

LaidEndToEnd::LaidEndToEnd(const std::vector<at::Tensor>& inputs, const char* what) {
  TORCH_CHECK(!inputs.empty(), "relaxlib: a ", what, " of tensors laid end to end needs at least one tensor");
  for (const at::Tensor& input : inputs) {
    check_tensor(input, what);
    TORCH_CHECK(input.scalar_type() == inputs.front().scalar_type(), "relaxlib: tensors laid end to end in a ", what,
                " must share a dtype, got ", inputs.front().scalar_type(), " and ", input.scalar_type());
    pointers.push_back(input.data_ptr());
    counts.push_back(input.numel());
    total += input.numel();
  }
}

}  // namespace relaxlib_torch
