// PyTorch glue: the compressed all-reduce's entry points (torch.ops.relaxlib.compressed_allreduce_*),
// registered as a fragment of the relaxlib op library (ops.cc registers the rest).
#include <ATen/ATen.h>
#include <torch/library.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "binding.h"
#include "output_cache.h"

namespace relaxlib_torch {
namespace {

// A compressed all-reduce's codec, reduction and input scale, and its error-feedback states kept
// alive by `flight` (their sizes are checked by the core against the tensor and the set's chunk).
void set_compressed_args(relax::RequestBuilder& r, InFlight& flight, const std::optional<at::Tensor>& worker_error,
                         const std::optional<at::Tensor>& owner_error, int64_t codec, int64_t op, double prescale) {
  r.compressed(static_cast<int32_t>(codec), static_cast<int32_t>(op)).input_scale(prescale);
  float* worker = nullptr;
  float* owner = nullptr;
  int64_t worker_bytes = 0, owner_bytes = 0;
  if (worker_error && worker_error->defined()) {
    check_tensor(*worker_error, "worker error state");
    TORCH_CHECK(worker_error->scalar_type() == at::kFloat, "relaxlib: the worker error state must be float32");
    worker = worker_error->data_ptr<float>();
    worker_bytes = capacity(*worker_error);  // its size is the core's to check (one rule)
    flight.keep.push_back(*worker_error);
  }
  if (owner_error && owner_error->defined()) {
    check_tensor(*owner_error, "owner error state");
    TORCH_CHECK(owner_error->scalar_type() == at::kFloat, "relaxlib: the owner error state must be float32");
    owner = owner_error->data_ptr<float>();
    owner_bytes = capacity(*owner_error);  // the core knows the set's chunk and checks it
    flight.keep.push_back(*owner_error);
  }
  r.error_feedback(worker, worker_bytes, owner, owner_bytes);
}

int64_t compressed_allreduce_async(const at::Tensor& input, const std::optional<at::Tensor>& out,
                                   const std::optional<at::Tensor>& worker_error,
                                   const std::optional<at::Tensor>& owner_error, const std::string& name, int64_t codec,
                                   int64_t op, int64_t process_set, double prescale) {
  std::unique_ptr<InFlight> flight;
  const relax::RequestBuilder r = checked(RELAX_REQ_COMPRESSED_ALLREDUCE, &name, 1, process_set, [&] {
    check_tensor(input, "compressed_allreduce input");
    // Without an output, one comes from the output cache (fresh large buffers cost page faults).
    const at::Tensor output =
        out && out->defined() ? *out : OutputCache::instance().empty(input.sizes(), input.scalar_type());
    relax::RequestBuilder request = same_shape_request(RELAX_REQ_COMPRESSED_ALLREDUCE, "compressed_allreduce", input,
                                                       output, name, process_set);
    flight = std::make_unique<InFlight>(InFlight{input, output, input.scalar_type()});
    set_compressed_args(request, *flight, worker_error, owner_error, codec, op, prescale);
    return request;
  });
  return submit(r.get(), std::move(flight), false);
}

// The compressed all-reduce of float32 tensors laid end to end, each read where it lies; the
// result is one flat tensor.
int64_t compressed_allreduce_concatenated_async(const std::vector<at::Tensor>& inputs,
                                                const std::optional<at::Tensor>& worker_error,
                                                const std::optional<at::Tensor>& owner_error, const std::string& name,
                                                int64_t codec, int64_t op, int64_t process_set, double prescale) {
  std::optional<LaidEndToEnd> laid;  // its arrays must outlive the submission
  std::unique_ptr<InFlight> flight;
  const relax::RequestBuilder r = checked(RELAX_REQ_COMPRESSED_ALLREDUCE, &name, 1, process_set, [&] {
    laid.emplace(inputs, "compressed_allreduce");
    TORCH_CHECK(inputs.front().scalar_type() == at::kFloat, "relaxlib: compressed_allreduce supports float32 "
                "tensors, got ", inputs.front().scalar_type());
    const at::Tensor output = OutputCache::instance().empty({laid->total}, at::kFloat);
    flight = std::make_unique<InFlight>(InFlight{inputs.front(), output, at::kFloat});
    flight->keep.assign(inputs.begin() + 1, inputs.end());
    relax::RequestBuilder request(RELAX_REQ_COMPRESSED_ALLREDUCE, name.c_str(), static_cast<int32_t>(process_set));
    laid->describe(request, RELAX_FLOAT32);
    request.output(output.data_ptr(), capacity(output));
    set_compressed_args(request, *flight, worker_error, owner_error, codec, op, prescale);
    return request;
  });
  return submit(r.get(), std::move(flight), false);
}

}  // namespace
}  // namespace relaxlib_torch

TORCH_LIBRARY_FRAGMENT(relaxlib, m) {
  m.def("compressed_allreduce_async(Tensor input, Tensor(a!)? output, Tensor(b!)? worker_error, "
        "Tensor(c!)? owner_error, str name, int codec, int op, int process_set, float prescale) -> int",
        relaxlib_torch::compressed_allreduce_async);
  m.def("compressed_allreduce_concatenated_async(Tensor[] inputs, Tensor(a!)? worker_error, Tensor(b!)? owner_error, "
        "str name, int codec, int op, int process_set, float prescale) -> int",
        relaxlib_torch::compressed_allreduce_concatenated_async);
}
