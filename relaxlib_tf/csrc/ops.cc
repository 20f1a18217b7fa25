// TensorFlow glue: the Relaxlib* custom ops. Each collective is an AsyncOpKernel that turns its
// tensors into core requests, submits them through the C ABI (relax/relax.h) and returns at once;
// the core's completion callback (engine thread) sets the op's status and calls TF's `done`.
// Only the C ABI is called: no MPI, no algorithm logic lives here.
//
// Errors carry the core's class in brackets ("[MismatchError] allreduce 'x': ...") so the Python
// layer can raise the matching relaxlib.errors class; the TF error code follows the same mapping.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "relax/relax.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/framework/tensor_shape.h"

namespace relaxlib_tf {
namespace {

using ::tensorflow::AsyncOpKernel;
using ::tensorflow::DataType;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;
using Status = ::absl::Status;

// ---- errors ----

// The TF status of a core status code and message: "[<relaxlib.errors class>] <message>".
Status FromRelax(int code, const std::string& message) {
  const std::string text = message.empty() ? "relaxlib error (status " + std::to_string(code) + ")" : message;
  switch (code) {
    case RELAX_OK:
      return Status();
    case RELAX_ERR_INVALID_ARGUMENT:
      return Status(absl::StatusCode::kInvalidArgument, "[InvalidArgumentError] " + text);
    case RELAX_ERR_MISMATCH:
      return Status(absl::StatusCode::kInvalidArgument, "[MismatchError] " + text);
    case RELAX_ERR_NOT_INITIALIZED:
      return Status(absl::StatusCode::kFailedPrecondition, "[NotInitializedError] " + text);
    case RELAX_ERR_SHUTDOWN:
      return Status(absl::StatusCode::kAborted, "[ShutdownError] " + text);
    case RELAX_ERR_STALLED:
      return Status(absl::StatusCode::kDeadlineExceeded, "[StalledError] " + text);
    case RELAX_ERR_DUPLICATE_NAME:
      return Status(absl::StatusCode::kAlreadyExists, "[DuplicateNameError] " + text);
    case RELAX_ERR_PROCESS_SET:
      return Status(absl::StatusCode::kInvalidArgument, "[ProcessSetError] " + text);
    default:
      return Status(absl::StatusCode::kInternal, "[RelaxError] " + text);
  }
}

// The error of the last failing C ABI call on this thread.
Status LastError() {
  const int code = relax_last_error_code();
  return FromRelax(code == RELAX_OK ? RELAX_ERR_INTERNAL : code, relax_last_error());
}

Status Invalid(const std::string& message) {
  return Status(absl::StatusCode::kInvalidArgument, "[InvalidArgumentError] " + message);
}

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

// ---- tensors ----

bool ToRelaxDtype(DataType t, int32_t* out) {
  switch (t) {
    case tensorflow::DT_FLOAT: *out = RELAX_FLOAT32; return true;
    case tensorflow::DT_DOUBLE: *out = RELAX_FLOAT64; return true;
    case tensorflow::DT_HALF: *out = RELAX_FLOAT16; return true;
    case tensorflow::DT_BFLOAT16: *out = RELAX_BFLOAT16; return true;
    case tensorflow::DT_INT32: *out = RELAX_INT32; return true;
    case tensorflow::DT_INT64: *out = RELAX_INT64; return true;
    case tensorflow::DT_UINT8: *out = RELAX_UINT8; return true;
    case tensorflow::DT_INT8: *out = RELAX_INT8; return true;
    case tensorflow::DT_BOOL: *out = RELAX_BOOL; return true;
    default: return false;
  }
}

void* DataPtr(const Tensor& t) { return const_cast<char*>(t.tensor_data().data()); }

Status ScalarString(const Tensor& t, const char* what, std::string* out) {
  if (t.dtype() != tensorflow::DT_STRING || t.dims() != 0) {
    return Invalid(std::string(what) + " must be a scalar string, got shape " + t.shape().DebugString());
  }
  *out = std::string(t.scalar<tensorflow::tstring>()());
  return Status();
}

Status StringVector(const Tensor& t, const char* what, int64_t expected, std::vector<std::string>* out) {
  if (t.dtype() != tensorflow::DT_STRING || t.dims() != 1 || t.dim_size(0) != expected) {
    return Invalid(std::string(what) + " must be a 1-D string tensor of " + std::to_string(expected) +
                   " names, got shape " + t.shape().DebugString());
  }
  const auto flat = t.flat<tensorflow::tstring>();
  out->clear();
  for (int64_t i = 0; i < expected; ++i) out->emplace_back(flat(i));
  return Status();
}

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
  // Run on success before the handle is released: fills outputs from the handle's results.
  std::function<Status(relax_handle_t, Part&)> on_success;
};

std::unique_ptr<Call> NewCall(OpKernelContext* ctx, AsyncOpKernel::DoneCallback done, size_t parts) {
  auto call = std::make_unique<Call>();
  call->ctx = ctx;
  call->done = std::move(done);
  call->parts.resize(parts);
  for (size_t i = 0; i < parts; ++i) {
    call->parts[i].call = call.get();
    call->parts[i].output_index = static_cast<int>(i);
  }
  return call;
}

void Finish(Call* raw) {
  std::unique_ptr<Call> call(raw);
  for (const Part& p : call->parts) {
    if (!p.status.ok()) {
      call->ctx->SetStatus(p.status);  // the first failing tensor's error
      break;
    }
  }
  AsyncOpKernel::DoneCallback done = std::move(call->done);
  call.reset();  // drop the tensor references before TF may tear the context down
  done();
}

// relax_alloc_fn: allocates the TF output once the engine knows its shape (engine thread).
void* AllocatePart(void* user, int32_t ndim, const int64_t* shape) {
  Part* p = static_cast<Part*>(user);
  TensorShape tf_shape;
  Status s = tensorflow::TensorShapeUtils::MakeShape(shape, ndim, &tf_shape);
  Tensor* out = nullptr;
  if (s.ok()) s = p->call->ctx->allocate_output(p->output_index, tf_shape, &out);
  if (!s.ok()) {
    p->alloc_status = Status(s.code(), "[RelaxError] could not allocate an output: " + std::string(s.message()));
    return nullptr;
  }
  p->output = *out;
  p->allocated = true;
  return DataPtr(*out);
}

// relax_done_fn (engine thread).
void PartDone(void* user, relax_handle_t handle, int32_t status, const char* message) {
  Part* p = static_cast<Part*>(user);
  Call* call = p->call;
  if (!p->alloc_status.ok()) {
    p->status = p->alloc_status;
  } else if (status != RELAX_OK) {
    p->status = FromRelax(status, message ? message : "");
  } else if (p->engine_allocates && !p->allocated) {
    p->status = Status(absl::StatusCode::kInternal, "[RelaxError] the request completed without an output");
  } else if (call->on_success) {
    p->status = call->on_success(handle, *p);
  }
  relax_release(handle);
  if (call->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) Finish(call);
}

// Submits the call's requests (one, or an atomic group); returns at once. On a local error the op
// fails immediately.
void Submit(std::unique_ptr<Call> call, std::vector<relax_request_t>& requests, bool allocating) {
  const relax_alloc_fn alloc = allocating ? &AllocatePart : nullptr;
  std::vector<void*> users;
  for (Part& p : call->parts) {
    p.engine_allocates = allocating;
    users.push_back(&p);
  }
  call->remaining.store(static_cast<int>(requests.size()), std::memory_order_relaxed);
  OpKernelContext* ctx = call->ctx;
  Call* raw = call.release();  // from here on owned by the callbacks, which may already run
  bool ok;
  if (requests.size() == 1) {
    ok = relax_enqueue(requests.data(), alloc, &PartDone, users[0]) != 0;
  } else {
    std::vector<relax_handle_t> handles(requests.size());
    ok = relax_enqueue_group(requests.data(), static_cast<int32_t>(requests.size()), alloc, &PartDone, users.data(),
                             handles.data()) == RELAX_OK;
  }
  if (!ok) {  // nothing was submitted: no callback will run
    std::unique_ptr<Call> back(raw);
    ctx->SetStatus(LastError());
    AsyncOpKernel::DoneCallback done = std::move(back->done);
    back.reset();
    done();
  }
}

// A request for `p.input` (or none: barrier, join).
Status MakeRequest(int32_t type, Part& p, const std::string& name, int32_t process_set, relax_request_t* r) {
  *r = relax_request_t{};
  r->type = type;
  r->name = name.c_str();
  r->prescale = 1.0;
  r->postscale = 1.0;
  r->process_set = process_set;
  if (!p.input.IsInitialized()) return Status();
  if (!ToRelaxDtype(p.input.dtype(), &r->dtype)) {
    return Invalid("'" + name + "': unsupported data type " + tensorflow::DataTypeString(p.input.dtype()));
  }
  p.shape.clear();
  for (int64_t d : p.input.shape().dim_sizes()) p.shape.push_back(d);
  r->ndim = static_cast<int32_t>(p.shape.size());
  r->shape = p.shape.empty() ? nullptr : p.shape.data();
  r->input = DataPtr(p.input);
  return Status();
}

// ---- shape functions ----

Status ScalarNameAt(InferenceContext* c, int index) {
  ShapeHandle unused;
  return c->WithRank(c->input(index), 0, &unused);
}

// Output `out` is `in` with an unknown dim 0 (allgather, reducescatter, alltoall).
Status Dim0Unknown(InferenceContext* c, int in, int out, const char* what) {
  ShapeHandle shape = c->input(in);
  if (!c->RankKnown(shape)) {
    c->set_output(out, c->UnknownShape());
    return Status();
  }
  if (c->Rank(shape) == 0) return Invalid(std::string(what) + " needs at least one dimension");
  ShapeHandle result;
  TF_RETURN_IF_ERROR(c->ReplaceDim(shape, 0, c->UnknownDim(), &result));
  c->set_output(out, result);
  return Status();
}

Status SameShapeFn(InferenceContext* c) {
  TF_RETURN_IF_ERROR(ScalarNameAt(c, 1));
  c->set_output(0, c->input(0));
  return Status();
}

Status GroupedSameShapeFn(InferenceContext* c) {
  const int n = c->num_inputs() - 1;
  ShapeHandle names;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(n), 1, &names));
  for (int i = 0; i < n; ++i) c->set_output(i, c->input(i));
  return Status();
}

std::function<Status(InferenceContext*)> GroupedDim0Fn(const char* what) {
  return [what](InferenceContext* c) -> Status {
    const int n = c->num_inputs() - 1;
    ShapeHandle names;
    TF_RETURN_IF_ERROR(c->WithRank(c->input(n), 1, &names));
    for (int i = 0; i < n; ++i) TF_RETURN_IF_ERROR(Dim0Unknown(c, i, i, what));
    return Status();
  };
}

// ---- op registrations ----

#define RELAX_REDUCE_TYPES "{float, double, half, bfloat16, int32, int64, uint8, int8}"
#define RELAX_ALL_TYPES "{float, double, half, bfloat16, int32, int64, uint8, int8, bool}"

REGISTER_OP("RelaxlibAllreduce")
    .Attr("T: " RELAX_REDUCE_TYPES)
    .Attr("reduce_op: int")
    .Attr("prescale: float = 1.0")
    .Attr("postscale: float = 1.0")
    .Attr("process_set: int = 0")
    .Input("tensor: T")
    .Input("tensor_name: string")
    .Output("output: T")
    .SetIsStateful()
    .SetShapeFn(SameShapeFn)
    .Doc("Reduces `tensor` over the ranks of `process_set` (relaxlib). Names must match across ranks.");

REGISTER_OP("RelaxlibGroupedAllreduce")
    .Attr("T: list(" RELAX_REDUCE_TYPES ") >= 1")
    .Attr("reduce_op: int")
    .Attr("prescale: float = 1.0")
    .Attr("postscale: float = 1.0")
    .Attr("process_set: int = 0")
    .Input("tensors: T")
    .Input("tensor_names: string")
    .Output("outputs: T")
    .SetIsStateful()
    .SetShapeFn(GroupedSameShapeFn)
    .Doc("All-reduces a list of tensors as one atomic group (relaxlib).");

REGISTER_OP("RelaxlibAllgather")
    .Attr("T: " RELAX_ALL_TYPES)
    .Attr("process_set: int = 0")
    .Input("tensor: T")
    .Input("tensor_name: string")
    .Output("output: T")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) -> Status {
      TF_RETURN_IF_ERROR(ScalarNameAt(c, 1));
      return Dim0Unknown(c, 0, 0, "allgather");
    })
    .Doc("Concatenates `tensor` of every rank along dim 0 (dim 0 may differ per rank) (relaxlib).");

REGISTER_OP("RelaxlibGroupedAllgather")
    .Attr("T: list(" RELAX_ALL_TYPES ") >= 1")
    .Attr("process_set: int = 0")
    .Input("tensors: T")
    .Input("tensor_names: string")
    .Output("outputs: T")
    .SetIsStateful()
    .SetShapeFn(GroupedDim0Fn("allgather"))
    .Doc("Allgathers a list of tensors as one atomic group (relaxlib).");

REGISTER_OP("RelaxlibBroadcast")
    .Attr("T: " RELAX_ALL_TYPES)
    .Attr("root_rank: int")
    .Attr("process_set: int = 0")
    .Input("tensor: T")
    .Input("tensor_name: string")
    .Output("output: T")
    .SetIsStateful()
    .SetShapeFn(SameShapeFn)
    .Doc("Broadcasts `tensor` from world rank `root_rank` (relaxlib).");

REGISTER_OP("RelaxlibReducescatter")
    .Attr("T: " RELAX_REDUCE_TYPES)
    .Attr("reduce_op: int")
    .Attr("prescale: float = 1.0")
    .Attr("postscale: float = 1.0")
    .Attr("process_set: int = 0")
    .Input("tensor: T")
    .Input("tensor_name: string")
    .Output("output: T")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) -> Status {
      TF_RETURN_IF_ERROR(ScalarNameAt(c, 1));
      return Dim0Unknown(c, 0, 0, "reducescatter");
    })
    .Doc("Reduces `tensor` and gives rank i block i of dim 0 (relaxlib).");

REGISTER_OP("RelaxlibGroupedReducescatter")
    .Attr("T: list(" RELAX_REDUCE_TYPES ") >= 1")
    .Attr("reduce_op: int")
    .Attr("prescale: float = 1.0")
    .Attr("postscale: float = 1.0")
    .Attr("process_set: int = 0")
    .Input("tensors: T")
    .Input("tensor_names: string")
    .Output("outputs: T")
    .SetIsStateful()
    .SetShapeFn(GroupedDim0Fn("reducescatter"))
    .Doc("Reduce-scatters a list of tensors as one atomic group (relaxlib).");

REGISTER_OP("RelaxlibAlltoall")
    .Attr("T: " RELAX_ALL_TYPES)
    .Attr("process_set: int = 0")
    .Input("tensor: T")
    .Input("splits: int64")
    .Input("tensor_name: string")
    .Output("output: T")
    .Output("received_splits: int64")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) -> Status {
      ShapeHandle splits;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 1, &splits));
      TF_RETURN_IF_ERROR(ScalarNameAt(c, 2));
      TF_RETURN_IF_ERROR(Dim0Unknown(c, 0, 0, "alltoall"));
      c->set_output(1, c->Vector(c->UnknownDim()));
      return Status();
    })
    .Doc("Sends `splits[i]` rows of dim 0 to rank i (empty splits: equal parts) (relaxlib).");

REGISTER_OP("RelaxlibBarrier")
    .Attr("process_set: int = 0")
    .Input("tensor_name: string")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) -> Status { return ScalarNameAt(c, 0); })
    .Doc("Waits until every rank of `process_set` reached the barrier (relaxlib).");

REGISTER_OP("RelaxlibJoin")
    .Input("tensor_name: string")
    .Output("last_rank: int32")
    .SetIsStateful()
    .SetShapeFn([](InferenceContext* c) -> Status {
      TF_RETURN_IF_ERROR(ScalarNameAt(c, 0));
      c->set_output(0, c->Scalar());
      return Status();
    })
    .Doc("Joins: returns the last rank to join once every rank joined (relaxlib).");

REGISTER_OP("RelaxlibSize")
    .Attr("process_set: int = 0")
    .Output("size: int32")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::ScalarShape);

REGISTER_OP("RelaxlibRank")
    .Attr("process_set: int = 0")
    .Output("rank: int32")
    .SetIsStateful()
    .SetShapeFn(tensorflow::shape_inference::ScalarShape);

REGISTER_OP("RelaxlibLocalSize").Output("local_size: int32").SetIsStateful().SetShapeFn(
    tensorflow::shape_inference::ScalarShape);

REGISTER_OP("RelaxlibLocalRank").Output("local_rank: int32").SetIsStateful().SetShapeFn(
    tensorflow::shape_inference::ScalarShape);

// ---- kernels ----

// Shared attrs of reductions.
struct ReduceAttrs {
  int reduce_op = RELAX_OP_SUM;
  float prescale = 1.0f;
  float postscale = 1.0f;

  explicit ReduceAttrs(OpKernelConstruction* c) {
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &reduce_op));
    OP_REQUIRES_OK(c, c->GetAttr("prescale", &prescale));
    OP_REQUIRES_OK(c, c->GetAttr("postscale", &postscale));
  }

  void Apply(relax_request_t& r) const {
    r.reduce_op = reduce_op;
    r.prescale = prescale;
    r.postscale = postscale;
  }
};

class CollectiveKernel : public AsyncOpKernel {
 public:
  explicit CollectiveKernel(OpKernelConstruction* c) : AsyncOpKernel(c) {
    if (c->HasAttr("process_set")) OP_REQUIRES_OK(c, c->GetAttr("process_set", &process_set_));
  }

 protected:
  int process_set_ = 0;
};

class AllreduceOp : public CollectiveKernel {
 public:
  explicit AllreduceOp(OpKernelConstruction* c) : CollectiveKernel(c), attrs_(c) {}

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    std::string name;
    RELAX_REQUIRES_OK_ASYNC(ctx, ScalarString(ctx->input(1), "allreduce: tensor_name", &name), done);
    const Tensor& input = ctx->input(0);
    Tensor* output = nullptr;
    RELAX_REQUIRES_OK_ASYNC(ctx, ctx->forward_input_or_allocate_output({0}, 0, input.shape(), &output), done);
    auto call = NewCall(ctx, std::move(done), 1);
    Part& p = call->parts[0];
    p.input = input;
    p.output = *output;
    std::vector<relax_request_t> requests(1);
    RELAX_REQUIRES_OK_ASYNC(ctx, MakeRequest(RELAX_REQ_ALLREDUCE, p, name, process_set_, &requests[0]), call->done);
    requests[0].output = DataPtr(p.output);
    attrs_.Apply(requests[0]);
    Submit(std::move(call), requests, false);
  }

 private:
  ReduceAttrs attrs_;
};

class BroadcastOp : public CollectiveKernel {
 public:
  explicit BroadcastOp(OpKernelConstruction* c) : CollectiveKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_rank_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    std::string name;
    RELAX_REQUIRES_OK_ASYNC(ctx, ScalarString(ctx->input(1), "broadcast: tensor_name", &name), done);
    const Tensor& input = ctx->input(0);
    Tensor* output = nullptr;
    RELAX_REQUIRES_OK_ASYNC(ctx, ctx->forward_input_or_allocate_output({0}, 0, input.shape(), &output), done);
    auto call = NewCall(ctx, std::move(done), 1);
    Part& p = call->parts[0];
    p.input = input;
    p.output = *output;
    std::vector<relax_request_t> requests(1);
    RELAX_REQUIRES_OK_ASYNC(ctx, MakeRequest(RELAX_REQ_BROADCAST, p, name, process_set_, &requests[0]), call->done);
    requests[0].output = DataPtr(p.output);
    requests[0].root_rank = root_rank_;
    Submit(std::move(call), requests, false);
  }

 private:
  int root_rank_ = 0;
};

// Allgather and reducescatter: one tensor, output allocated by the engine.
class AllocatingOp : public CollectiveKernel {
 public:
  AllocatingOp(OpKernelConstruction* c, int32_t type) : CollectiveKernel(c), type_(type) {
    if (type_ == RELAX_REQ_REDUCESCATTER) attrs_ = std::make_unique<ReduceAttrs>(c);
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const char* what = type_ == RELAX_REQ_ALLGATHER ? "allgather" : "reducescatter";
    std::string name;
    RELAX_REQUIRES_OK_ASYNC(ctx, ScalarString(ctx->input(1), (std::string(what) + ": tensor_name").c_str(), &name),
                            done);
    const Tensor& input = ctx->input(0);
    if (input.dims() == 0) {
      RELAX_REQUIRES_OK_ASYNC(ctx, Invalid(std::string(what) + " needs at least one dimension ('" + name + "' is a scalar)"),
                              done);
    }
    auto call = NewCall(ctx, std::move(done), 1);
    Part& p = call->parts[0];
    p.input = input;
    std::vector<relax_request_t> requests(1);
    RELAX_REQUIRES_OK_ASYNC(ctx, MakeRequest(type_, p, name, process_set_, &requests[0]), call->done);
    if (attrs_) attrs_->Apply(requests[0]);
    Submit(std::move(call), requests, true);
  }

 private:
  int32_t type_;
  std::unique_ptr<ReduceAttrs> attrs_;
};

class AllgatherOp : public AllocatingOp {
 public:
  explicit AllgatherOp(OpKernelConstruction* c) : AllocatingOp(c, RELAX_REQ_ALLGATHER) {}
};

class ReducescatterOp : public AllocatingOp {
 public:
  explicit ReducescatterOp(OpKernelConstruction* c) : AllocatingOp(c, RELAX_REQ_REDUCESCATTER) {}
};

// Grouped forms: N tensors (names 1-D), one atomic submission, the op completes with the last.
class GroupedOp : public CollectiveKernel {
 public:
  GroupedOp(OpKernelConstruction* c, int32_t type) : CollectiveKernel(c), type_(type) {
    if (type_ != RELAX_REQ_ALLGATHER) attrs_ = std::make_unique<ReduceAttrs>(c);
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const char* what = type_ == RELAX_REQ_ALLREDUCE   ? "grouped_allreduce"
                       : type_ == RELAX_REQ_ALLGATHER ? "grouped_allgather"
                                                      : "grouped_reducescatter";
    const int n = ctx->num_inputs() - 1;
    std::vector<std::string> names;
    RELAX_REQUIRES_OK_ASYNC(
        ctx, StringVector(ctx->input(n), (std::string(what) + ": tensor_names").c_str(), n, &names), done);
    const bool allocating = type_ != RELAX_REQ_ALLREDUCE;
    std::vector<Tensor*> outputs(static_cast<size_t>(n), nullptr);
    for (int i = 0; i < n; ++i) {
      const Tensor& input = ctx->input(i);
      if (allocating && input.dims() == 0) {
        RELAX_REQUIRES_OK_ASYNC(
            ctx, Invalid(std::string(what) + " needs at least one dimension ('" + names[i] + "' is a scalar)"), done);
      }
      if (!allocating) {
        RELAX_REQUIRES_OK_ASYNC(ctx, ctx->forward_input_or_allocate_output({i}, i, input.shape(), &outputs[i]), done);
      }
    }
    auto call = NewCall(ctx, std::move(done), static_cast<size_t>(n));
    std::vector<relax_request_t> requests(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      Part& p = call->parts[static_cast<size_t>(i)];
      p.input = ctx->input(i);
      relax_request_t& r = requests[static_cast<size_t>(i)];
      RELAX_REQUIRES_OK_ASYNC(ctx, MakeRequest(type_, p, names[static_cast<size_t>(i)], process_set_, &r),
                              call->done);
      if (!allocating) {
        p.output = *outputs[static_cast<size_t>(i)];
        r.output = DataPtr(p.output);
      }
      if (attrs_) attrs_->Apply(r);
    }
    Submit(std::move(call), requests, allocating);
  }

 private:
  int32_t type_;
  std::unique_ptr<ReduceAttrs> attrs_;
};

class GroupedAllreduceOp : public GroupedOp {
 public:
  explicit GroupedAllreduceOp(OpKernelConstruction* c) : GroupedOp(c, RELAX_REQ_ALLREDUCE) {}
};

class GroupedAllgatherOp : public GroupedOp {
 public:
  explicit GroupedAllgatherOp(OpKernelConstruction* c) : GroupedOp(c, RELAX_REQ_ALLGATHER) {}
};

class GroupedReducescatterOp : public GroupedOp {
 public:
  explicit GroupedReducescatterOp(OpKernelConstruction* c) : GroupedOp(c, RELAX_REQ_REDUCESCATTER) {}
};

class AlltoallOp : public CollectiveKernel {
 public:
  explicit AlltoallOp(OpKernelConstruction* c) : CollectiveKernel(c) {}

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    std::string name;
    RELAX_REQUIRES_OK_ASYNC(ctx, ScalarString(ctx->input(2), "alltoall: tensor_name", &name), done);
    const Tensor& input = ctx->input(0);
    const Tensor& splits = ctx->input(1);
    if (input.dims() == 0) {
      RELAX_REQUIRES_OK_ASYNC(ctx, Invalid("alltoall needs at least one dimension ('" + name + "' is a scalar)"), done);
    }
    if (splits.dims() != 1) {
      RELAX_REQUIRES_OK_ASYNC(
          ctx, Invalid("alltoall '" + name + "': splits must be 1-D, got shape " + splits.shape().DebugString()), done);
    }
    auto call = NewCall(ctx, std::move(done), 1);
    Part& p = call->parts[0];
    p.input = input;
    call->on_success = [](relax_handle_t handle, Part& part) -> Status {
      const int n = relax_handle_received_splits(handle, nullptr, 0);
      if (n < 0) return Status(absl::StatusCode::kInternal, "[RelaxError] alltoall: received splits are unavailable");
      Tensor* out = nullptr;
      TF_RETURN_IF_ERROR(part.call->ctx->allocate_output(1, TensorShape({n}), &out));
      if (n > 0) relax_handle_received_splits(handle, out->flat<int64_t>().data(), n);
      return Status();
    };
    std::vector<relax_request_t> requests(1);
    RELAX_REQUIRES_OK_ASYNC(ctx, MakeRequest(RELAX_REQ_ALLTOALL, p, name, process_set_, &requests[0]), call->done);
    requests[0].nsplits = static_cast<int32_t>(splits.NumElements());
    requests[0].splits = splits.NumElements() > 0 ? splits.flat<int64_t>().data() : nullptr;
    Submit(std::move(call), requests, true);
  }
};

class BarrierOp : public CollectiveKernel {
 public:
  explicit BarrierOp(OpKernelConstruction* c) : CollectiveKernel(c) {}

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    std::string name;
    RELAX_REQUIRES_OK_ASYNC(ctx, ScalarString(ctx->input(0), "barrier: tensor_name", &name), done);
    auto call = NewCall(ctx, std::move(done), 1);
    std::vector<relax_request_t> requests(1);
    RELAX_REQUIRES_OK_ASYNC(ctx, MakeRequest(RELAX_REQ_BARRIER, call->parts[0], name, process_set_, &requests[0]),
                            call->done);
    Submit(std::move(call), requests, false);
  }
};

class JoinOp : public CollectiveKernel {
 public:
  explicit JoinOp(OpKernelConstruction* c) : CollectiveKernel(c) {}

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    std::string name;
    RELAX_REQUIRES_OK_ASYNC(ctx, ScalarString(ctx->input(0), "join: tensor_name", &name), done);
    if (name.empty()) name = "join";  // the core uses its own name for joins; it must be non-empty
    Tensor* last_rank = nullptr;
    RELAX_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(0, TensorShape(), &last_rank), done);
    auto call = NewCall(ctx, std::move(done), 1);
    call->parts[0].output = *last_rank;
    call->on_success = [](relax_handle_t handle, Part& part) -> Status {
      part.output.scalar<int32_t>()() = static_cast<int32_t>(relax_handle_result(handle));
      return Status();
    };
    std::vector<relax_request_t> requests(1);
    RELAX_REQUIRES_OK_ASYNC(ctx, MakeRequest(RELAX_REQ_JOIN, call->parts[0], name, 0, &requests[0]), call->done);
    Submit(std::move(call), requests, false);
  }
};

// Synchronous topology queries: int32 scalars.
class TopologyOp : public OpKernel {
 public:
  enum Kind { kSize, kRank, kLocalSize, kLocalRank };

  TopologyOp(OpKernelConstruction* c, Kind kind) : OpKernel(c), kind_(kind) {
    if (kind_ == kSize || kind_ == kRank) OP_REQUIRES_OK(c, c->GetAttr("process_set", &process_set_));
  }

  void Compute(OpKernelContext* ctx) override {
    if (!relax_is_initialized()) {
      ctx->SetStatus(FromRelax(RELAX_ERR_NOT_INITIALIZED,
                               "relaxlib has not been initialized (or was shut down); call init() first."));
      return;
    }
    int value = 0;
    switch (kind_) {
      case kSize: value = relax_process_set_size(process_set_); break;
      case kRank:
        value = relax_process_set_rank(process_set_);
        if (value == -1) {  // initialized (checked above): not a member of the set
          ctx->SetStatus(FromRelax(RELAX_ERR_PROCESS_SET, "rank " + std::to_string(relax_rank()) +
                                                              " is not a member of process set " +
                                                              std::to_string(process_set_)));
          return;
        }
        break;
      case kLocalSize: value = relax_local_size(); break;
      case kLocalRank: value = relax_local_rank(); break;
    }
    if (value < 0) {
      ctx->SetStatus(LastError());
      return;
    }
    Tensor* out = nullptr;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape(), &out));
    out->scalar<int32_t>()() = value;
  }

 private:
  Kind kind_;
  int process_set_ = 0;
};

#define RELAX_TOPOLOGY_KERNEL(Class, kind)                                         \
  class Class : public TopologyOp {                                                \
   public:                                                                         \
    explicit Class(OpKernelConstruction* c) : TopologyOp(c, TopologyOp::kind) {} \
  };
RELAX_TOPOLOGY_KERNEL(SizeOp, kSize)
RELAX_TOPOLOGY_KERNEL(RankOp, kRank)
RELAX_TOPOLOGY_KERNEL(LocalSizeOp, kLocalSize)
RELAX_TOPOLOGY_KERNEL(LocalRankOp, kLocalRank)
#undef RELAX_TOPOLOGY_KERNEL

using ::tensorflow::DEVICE_CPU;

REGISTER_KERNEL_BUILDER(Name("RelaxlibAllreduce").Device(DEVICE_CPU), AllreduceOp);
REGISTER_KERNEL_BUILDER(Name("RelaxlibGroupedAllreduce").Device(DEVICE_CPU), GroupedAllreduceOp);
REGISTER_KERNEL_BUILDER(Name("RelaxlibAllgather").Device(DEVICE_CPU), AllgatherOp);
REGISTER_KERNEL_BUILDER(Name("RelaxlibGroupedAllgather").Device(DEVICE_CPU), GroupedAllgatherOp);
REGISTER_KERNEL_BUILDER(Name("RelaxlibBroadcast").Device(DEVICE_CPU), BroadcastOp);
REGISTER_KERNEL_BUILDER(Name("RelaxlibReducescatter").Device(DEVICE_CPU), ReducescatterOp);
REGISTER_KERNEL_BUILDER(Name("RelaxlibGroupedReducescatter").Device(DEVICE_CPU), GroupedReducescatterOp);
REGISTER_KERNEL_BUILDER(Name("RelaxlibAlltoall").Device(DEVICE_CPU), AlltoallOp);
REGISTER_KERNEL_BUILDER(Name("RelaxlibBarrier").Device(DEVICE_CPU), BarrierOp);
REGISTER_KERNEL_BUILDER(Name("RelaxlibJoin").Device(DEVICE_CPU), JoinOp);
REGISTER_KERNEL_BUILDER(Name("RelaxlibSize").Device(DEVICE_CPU), SizeOp);
REGISTER_KERNEL_BUILDER(Name("RelaxlibRank").Device(DEVICE_CPU), RankOp);
REGISTER_KERNEL_BUILDER(Name("RelaxlibLocalSize").Device(DEVICE_CPU), LocalSizeOp);
REGISTER_KERNEL_BUILDER(Name("RelaxlibLocalRank").Device(DEVICE_CPU), LocalRankOp);

}  // namespace
}  // namespace relaxlib_tf
