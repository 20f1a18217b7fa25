// TensorFlow glue, shared part (see bridge.h).
#include "bridge.h"

#include <algorithm>
#include <limits>

#include "interrupts.h"

namespace relaxlib_tf {

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
      return Status(absl::StatusCode::kFailedPrecondition, "[MismatchError] " + text);  // as Horovod
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
    case RELAX_ERR_PROC_FAILED:
      return Status(absl::StatusCode::kAborted, "[ProcessFailedError] " + text);
    default:
      return Status(absl::StatusCode::kInternal, "[RelaxError] " + text);
  }
}

// The error of the last failing C ABI call on this thread.
Status LastError() {
  const int code = relax_last_error_code();
  return FromRelax(code == RELAX_OK ? RELAX_ERR_INTERNAL : code, relax_last_error());
}

void AnnounceRejection(int32_t type, const std::vector<std::string>& names, int32_t process_set, const Status& why) {
  // best effort: this rank fails with `why` regardless
  (void)relax::announce_rejection(type, names, process_set, std::string(why.message()));
}

Status Invalid(const std::string& message) {
  return Status(absl::StatusCode::kInvalidArgument, "[InvalidArgumentError] " + message);
}

// ---- tensors ----

static bool ToRelaxDtype(DataType t, int32_t* out) {
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
    case tensorflow::DT_INT16: *out = RELAX_INT16; return true;
    case tensorflow::DT_UINT16: *out = RELAX_UINT16; return true;
    default: return false;
  }
}

void* DataPtr(const Tensor& t) { return const_cast<char*>(t.tensor_data().data()); }

int64_t Capacity(const Tensor& t) { return static_cast<int64_t>(t.TotalBytes()); }

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

static void Finish(Call* raw) {
  std::unique_ptr<Call> call(raw);
  AsyncOpKernel::DoneCallback done;
  {
    std::lock_guard<std::mutex> lock(interrupts::Mutex());
    if (!interrupts::UntrackLocked(raw)) return;  // a signal already failed the op
    for (const Part& p : call->parts) {
      if (p.status.ok()) continue;
      if (call->failure_as_nan && p.output.dtype() == tensorflow::DT_FLOAT) {
        float* out = static_cast<float*>(DataPtr(p.output));
        std::fill(out, out + p.output.NumElements(), std::numeric_limits<float>::quiet_NaN());
        continue;
      }
      call->ctx->SetStatus(p.status);  // the first failing tensor's error
      break;
    }
    done = std::move(call->done);
  }
  call.reset();  // drop the tensor references before TF may tear the context down
  done();
}

// relax_alloc_fn: allocates the TF output once the engine knows its shape (on the thread running
// the round: the engine thread, or one inside relax_run).
static void* AllocatePart(void* user, int32_t ndim, const int64_t* shape) {
  Part* p = static_cast<Part*>(user);
  std::lock_guard<std::mutex> lock(interrupts::Mutex());
  if (p->call->abandoned) {  // nobody reads the result; the engine still needs somewhere to write it
    int64_t bytes = static_cast<int64_t>(tensorflow::DataTypeSize(p->input.dtype()));
    for (int32_t i = 0; i < ndim; ++i) bytes *= shape[i];
    p->scratch.resize(static_cast<size_t>(bytes > 0 ? bytes : 1));
    return p->scratch.data();
  }
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

// relax_done_fn (on the thread running the round, as above).
static void PartDone(void* user, relax_handle_t handle, int32_t status, const char* message) {
  Part* p = static_cast<Part*>(user);
  Call* call = p->call;
  if (!p->alloc_status.ok()) {
    p->status = p->alloc_status;
  } else if (status != RELAX_OK) {
    p->status = FromRelax(status, message ? message : "");
  } else if (p->engine_allocates && !p->allocated && p->scratch.empty()) {
    p->status = Status(absl::StatusCode::kInternal, "[RelaxError] the request completed without an output");
  } else if (call->on_success) {
    std::lock_guard<std::mutex> lock(interrupts::Mutex());
    if (!call->abandoned) p->status = call->on_success(handle, *p);
  }
  relax_release(handle);
  if (call->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) Finish(call);
}

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
  interrupts::Track(raw);
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
    AsyncOpKernel::DoneCallback done;
    {
      std::lock_guard<std::mutex> lock(interrupts::Mutex());
      if (!interrupts::UntrackLocked(raw)) return;  // a signal already failed the op
      ctx->SetStatus(LastError());
      done = std::move(back->done);
    }
    back.reset();
    done();
  }
}

Status SetInput(Part& p, const std::string& name, relax::RequestBuilder& r) {
  int32_t dtype = 0;
  if (!ToRelaxDtype(p.input.dtype(), &dtype)) {
    return Invalid("'" + name + "': unsupported data type " + tensorflow::DataTypeString(p.input.dtype()));
  }
  p.shape.clear();
  for (int64_t d : p.input.shape().dim_sizes()) p.shape.push_back(d);
  r.tensor(dtype, static_cast<int32_t>(p.shape.size()), p.shape.data(), DataPtr(p.input), Capacity(p.input));
  return Status();
}

}  // namespace relaxlib_tf
