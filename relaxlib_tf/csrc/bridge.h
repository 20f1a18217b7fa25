// TensorFlow glue, shared part: core status -> TF status, TF tensors -> core requests, and the
// in-flight state of an asynchronous op until the core's completion callback finishes it.
// Only the C ABI (relax/relax.h) is called: no MPI, no algorithm logic lives here.
//
// Errors carry the core's class in brackets ("[MismatchError] allreduce 'x': ...") so the Python
// layer can raise the matching relaxlib.errors class; the TF error code follows the same mapping.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "relax/relax.h"
#include "relax/request_builder.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace relaxlib_tf {

using ::tensorflow::AsyncOpKernel;
using ::tensorflow::DataType;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using Status = ::absl::Status;

// The TF status of a core status code and message: "[<relaxlib.errors class>] <message>".
Status FromRelax(int code, const std::string& message);
// The error of the last failing C ABI call on this thread.
Status LastError();
Status Invalid(const std::string& message);

// Like OP_REQUIRES_OK_ASYNC, without TF's warning log (the error reaches Python anyway).
#define RELAX_REQUIRES_OK_ASYNC(CTX, STATUS, DONE) \
  do {                                             \
    Status _relax_status = (STATUS);               \
    if (!_relax_status.ok()) {                     \
      (CTX)->SetStatus(_relax_status);             \
      (DONE)();                                    \
      return;                                      \
    }                                              \
  } while (0)

// Announces to the other members that this rank rejected the requests `names` (one, or a group)
// before submitting them (relax_reject), so they fail instead of waiting for it.
void AnnounceRejection(int32_t type, const std::vector<std::string>& names, int32_t process_set, const Status& why);

// RELAX_REQUIRES_OK_ASYNC for a failure after the request's names are known: the other members
// learn of it too.
#define RELAX_REJECT_IF_ERROR_ASYNC(CTX, STATUS, DONE, TYPE, NAMES, SET) \
  do {                                                                  \
    Status _relax_status = (STATUS);                                    \
    if (!_relax_status.ok()) {                                          \
      AnnounceRejection((TYPE), NAMES, (SET), _relax_status);           \
      (CTX)->SetStatus(_relax_status);                                  \
      (DONE)();                                                         \
      return;                                                           \
    }                                                                   \
  } while (0)

void* DataPtr(const Tensor& t);
// The capacity in bytes of a tensor's buffer, which every buffer handed to the core travels with:
// the core refuses a request whose buffers are smaller than what it reads or writes (relax.h,
// "Buffer capacities"), so the kernels need no size checks of their own.
int64_t Capacity(const Tensor& t);
Status ScalarString(const Tensor& t, const char* what, std::string* out);
Status StringVector(const Tensor& t, const char* what, int64_t expected, std::vector<std::string>* out);

// ---- in-flight state ----

struct Call;

// One request of a call: the tensors the engine reads and writes, kept alive (Tensor copies hold
// a reference) until the request completes.
struct Part {
  Call* call = nullptr;
  int output_index = 0;       // output the engine allocates (allgather, reducescatter, alltoall)
  bool engine_allocates = false;
  Tensor input;
  Tensor output;
  std::vector<int64_t> shape;  // storage for the request's shape
  bool allocated = false;
  std::vector<char> scratch;  // the output of an abandoned call (its context is gone)
  std::vector<Tensor> extra;  // further buffers the engine writes (compressed all-reduce residuals)
  Status alloc_status;
  Status status;
};

// One TF op invocation: one request, or a group submitted atomically. Owned by the completion
// callbacks once submitted; the last part to finish completes the TF op and frees it.
struct Call {
  OpKernelContext* ctx = nullptr;
  AsyncOpKernel::DoneCallback done;
  std::vector<Part> parts;  // sized before submission, never resized afterwards
  std::atomic<int> remaining{0};
  bool abandoned = false;  // failed by a signal (interrupts.h) while the core still runs it
  // A request that fails fills its float32 output with NaN and the op succeeds (a graph passes
  // the failure on to ranks that wait for this one's result, then raises on every rank).
  bool failure_as_nan = false;
  // Run on success before the handle is released: fills outputs from the handle's results.
  std::function<Status(relax_handle_t, Part&)> on_success;
};

std::unique_ptr<Call> NewCall(OpKernelContext* ctx, AsyncOpKernel::DoneCallback done, size_t parts);
// Submits the call's requests (one, or an atomic group) and returns at once; the callbacks own
// the call from then on. On a local error the op fails immediately.
void Submit(std::unique_ptr<Call> call, std::vector<relax_request_t>& requests, bool allocating);
// Sets `p.input` as the request's tensor (dtype, shape, buffer); the request is built with
// relax/request_builder.h, which starts it with its kind's defaults. `name` is for the error.
Status SetInput(Part& p, const std::string& name, relax::RequestBuilder& r);

}  // namespace relaxlib_tf
