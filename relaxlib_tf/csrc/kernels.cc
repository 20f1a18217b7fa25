// TensorFlow glue: the kernels of the Relaxlib* ops (defined in op_defs.cc). Each collective is an
// AsyncOpKernel that turns its tensors into core requests, submits them and returns at once; the
// core's completion callback (on the thread running the round) sets the op's status and calls TF's `done`.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bridge.h"

namespace relaxlib_tf {
namespace {

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

  // Into args.allreduce or args.reducescatter.reduce, as the request's type says.
  void Apply(relax::RequestBuilder& r) const { r.reduce(reduce_op, prescale, postscale); }
};

class CollectiveKernel : public AsyncOpKernel {
 public:
  explicit CollectiveKernel(OpKernelConstruction* c) : AsyncOpKernel(c) {
    if (c->HasAttr("process_set")) OP_REQUIRES_OK(c, c->GetAttr("process_set", &process_set_));
  }

 protected:
  int process_set_ = 0;
};

// Allreduce, broadcast, allgather, reducescatter and their grouped forms: N tensors (one, with a
// scalar name, or N with 1-D names) submitted atomically; the op completes with the last. Allreduce
// and broadcast write outputs of the input's shape (in place when TF allows); the others get
// outputs the engine allocates once it knows the shape.
class TensorsOp : public CollectiveKernel {
 public:
  TensorsOp(OpKernelConstruction* c, int32_t type, bool grouped, const char* what)
      : CollectiveKernel(c), type_(type), grouped_(grouped), what_(what) {
    if (type_ == RELAX_REQ_ALLREDUCE || type_ == RELAX_REQ_REDUCESCATTER) attrs_ = std::make_unique<ReduceAttrs>(c);
    if (type_ == RELAX_REQ_BROADCAST) OP_REQUIRES_OK(c, c->GetAttr("root_rank", &root_rank_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const int n = grouped_ ? ctx->num_inputs() - 1 : 1;
    std::vector<std::string> names(1);
    RELAX_REQUIRES_OK_ASYNC(ctx,
                            grouped_ ? StringVector(ctx->input(n), (what_ + ": tensor_names").c_str(), n, &names)
                                     : ScalarString(ctx->input(1), (what_ + ": tensor_name").c_str(), &names[0]),
                            done);
    const bool allocating = type_ == RELAX_REQ_ALLGATHER || type_ == RELAX_REQ_REDUCESCATTER;
    std::vector<Tensor*> outputs(static_cast<size_t>(n), nullptr);
    for (int i = 0; i < n; ++i) {
      const Tensor& input = ctx->input(i);
      const std::string& name = names[static_cast<size_t>(i)];
      if (allocating && input.dims() == 0) {
        RELAX_REJECT_IF_ERROR_ASYNC(ctx,
                                    Invalid(what_ + " needs at least one dimension ('" + name + "' is a scalar)"),
                                    done, type_, names, process_set_);
      }
      if (!allocating) {
        RELAX_REJECT_IF_ERROR_ASYNC(ctx, ctx->forward_input_or_allocate_output({i}, i, input.shape(), &outputs[i]),
                                    done, type_, names, process_set_);
      }
    }
    auto call = NewCall(ctx, std::move(done), static_cast<size_t>(n));
    std::vector<relax_request_t> requests(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      Part& p = call->parts[static_cast<size_t>(i)];
      p.input = ctx->input(i);
      const std::string& name = names[static_cast<size_t>(i)];
      relax::RequestBuilder r(type_, name.c_str(), process_set_);
      RELAX_REJECT_IF_ERROR_ASYNC(ctx, SetInput(p, name, r), call->done, type_, names, process_set_);
      if (!allocating) {
        p.output = *outputs[static_cast<size_t>(i)];
        r.output(DataPtr(p.output), Capacity(p.output));
      }
      if (attrs_) attrs_->Apply(r);
      if (type_ == RELAX_REQ_BROADCAST) r.root(root_rank_);
      requests[static_cast<size_t>(i)] = r.get();
    }
    Submit(std::move(call), requests, allocating);
  }

 private:
  int32_t type_;
  bool grouped_;
  std::string what_;
  std::unique_ptr<ReduceAttrs> attrs_;
  int root_rank_ = 0;
};

#define RELAX_TENSORS_KERNEL(Class, type, grouped, what)                                 \
  class Class : public TensorsOp {                                                       \
   public:                                                                               \
    explicit Class(OpKernelConstruction* c) : TensorsOp(c, type, grouped, what) {}       \
  };
RELAX_TENSORS_KERNEL(AllreduceOp, RELAX_REQ_ALLREDUCE, false, "allreduce")
RELAX_TENSORS_KERNEL(BroadcastOp, RELAX_REQ_BROADCAST, false, "broadcast")
RELAX_TENSORS_KERNEL(AllgatherOp, RELAX_REQ_ALLGATHER, false, "allgather")
RELAX_TENSORS_KERNEL(ReducescatterOp, RELAX_REQ_REDUCESCATTER, false, "reducescatter")
RELAX_TENSORS_KERNEL(GroupedAllreduceOp, RELAX_REQ_ALLREDUCE, true, "grouped_allreduce")
RELAX_TENSORS_KERNEL(GroupedAllgatherOp, RELAX_REQ_ALLGATHER, true, "grouped_allgather")
RELAX_TENSORS_KERNEL(GroupedReducescatterOp, RELAX_REQ_REDUCESCATTER, true, "grouped_reducescatter")
#undef RELAX_TENSORS_KERNEL

class AlltoallOp : public CollectiveKernel {
 public:
  explicit AlltoallOp(OpKernelConstruction* c) : CollectiveKernel(c) {}

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    std::string name;
    RELAX_REQUIRES_OK_ASYNC(ctx, ScalarString(ctx->input(2), "alltoall: tensor_name", &name), done);
    const Tensor& input = ctx->input(0);
    const Tensor& splits = ctx->input(1);
    if (input.dims() == 0) {
      RELAX_REJECT_IF_ERROR_ASYNC(ctx, Invalid("alltoall needs at least one dimension ('" + name + "' is a scalar)"),
                                  done, RELAX_REQ_ALLTOALL, {name}, process_set_);
    }
    if (splits.dims() != 1) {
      RELAX_REJECT_IF_ERROR_ASYNC(
          ctx, Invalid("alltoall '" + name + "': splits must be 1-D, got shape " + splits.shape().DebugString()), done,
          RELAX_REQ_ALLTOALL, {name}, process_set_);
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
    relax::RequestBuilder r(RELAX_REQ_ALLTOALL, name.c_str(), process_set_);
    RELAX_REJECT_IF_ERROR_ASYNC(ctx, SetInput(p, name, r), call->done, RELAX_REQ_ALLTOALL, {name}, process_set_);
    r.splits(static_cast<int32_t>(splits.NumElements()),
             splits.NumElements() > 0 ? splits.flat<int64_t>().data() : nullptr);
    std::vector<relax_request_t> requests{r.get()};
    Submit(std::move(call), requests, true);
  }
};

// Neighbour and group averages: direct requests (the core's direct lane, not negotiated). The
// rank lists and weights are copied by the core at submission; CHOCO's estimates, like the
// compressed all-reduce's residuals, are copied to outputs that the core updates in place.
class DirectAverageOp : public AsyncOpKernel {
 public:
  DirectAverageOp(OpKernelConstruction* c, int32_t type) : AsyncOpKernel(c), type_(type) {
    if (type_ == RELAX_REQ_NEIGHBOR_AVERAGE) {
      OP_REQUIRES_OK(c, c->GetAttr("codec", &codec_));
      OP_REQUIRES_OK(c, c->GetAttr("consensus_step", &consensus_step_));
    }
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const bool neighbors = type_ == RELAX_REQ_NEIGHBOR_AVERAGE;
    std::string name;
    RELAX_REQUIRES_OK_ASYNC(ctx, ScalarString(ctx->input(neighbors ? 6 : 3), "tensor_name", &name), done);
    const Tensor& ranks = ctx->input(1);
    const Tensor& weights = ctx->input(2);
    if (ranks.dims() != 1 || weights.dims() != 1 || ranks.NumElements() != weights.NumElements()) {
      RELAX_REQUIRES_OK_ASYNC(ctx,
                              Invalid("'" + name + "': ranks and weights must be vectors of one length, got " +
                                      ranks.shape().DebugString() + " and " + weights.shape().DebugString()),
                              done);
    }
    if (neighbors && ctx->input(3).dims() != 0) {
      RELAX_REQUIRES_OK_ASYNC(ctx, Invalid("'" + name + "': self_weight must be a scalar"), done);
    }
    const int outputs = neighbors ? 3 : 1;
    std::vector<Tensor*> out(static_cast<size_t>(outputs), nullptr);
    RELAX_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(0, ctx->input(0).shape(), &out[0]), done);
    for (int i = 1; i < outputs; ++i) {  // the estimates: updated in place by the core
      const Tensor& estimate = ctx->input(3 + i);
      RELAX_REQUIRES_OK_ASYNC(ctx, ctx->allocate_output(i, estimate.shape(), &out[static_cast<size_t>(i)]), done);
      const size_t bytes = static_cast<size_t>(estimate.NumElements()) * sizeof(float);
      if (bytes > 0) std::memcpy(DataPtr(*out[static_cast<size_t>(i)]), DataPtr(estimate), bytes);
    }
    auto call = NewCall(ctx, std::move(done), 1);
    Part& p = call->parts[0];
    p.input = ctx->input(0);
    p.output = *out[0];
    for (int i = 1; i < outputs; ++i) p.extra.push_back(*out[static_cast<size_t>(i)]);
    relax::RequestBuilder r(type_, name.c_str(), 0);
    RELAX_REQUIRES_OK_ASYNC(ctx, SetInput(p, name, r), call->done);
    r.output(DataPtr(p.output), Capacity(p.output));
    const auto* rank_data = static_cast<const int32_t*>(DataPtr(ranks));
    const auto* weight_data = static_cast<const double*>(DataPtr(weights));
    const int32_t count = static_cast<int32_t>(ranks.NumElements());
    if (neighbors) {
      auto estimate = [&](const Tensor& t) {
        return codec_ && t.NumElements() > 0 ? static_cast<float*>(DataPtr(t)) : nullptr;
      };
      r.neighbors(count, rank_data, weight_data, ctx->input(3).scalar<double>()())
          .choco(codec_, consensus_step_, estimate(p.extra[0]), Capacity(p.extra[0]), estimate(p.extra[1]),
                 Capacity(p.extra[1]));
    } else {
      r.group(count, rank_data, weight_data);
    }
    std::vector<relax_request_t> requests{r.get()};
    Submit(std::move(call), requests, false);
  }

 private:
  int32_t type_;
  int codec_ = 0;
  float consensus_step_ = 1.0f;
};

class NeighborAverageOp : public DirectAverageOp {
 public:
  explicit NeighborAverageOp(OpKernelConstruction* c) : DirectAverageOp(c, RELAX_REQ_NEIGHBOR_AVERAGE) {}
};

class GroupAverageOp : public DirectAverageOp {
 public:
  explicit GroupAverageOp(OpKernelConstruction* c) : DirectAverageOp(c, RELAX_REQ_GROUP_AVERAGE) {}
};

// Compressed all-reduce with the residuals of error feedback owned by the caller (TF variables
// in relaxlib_tf.ErrorFeedback): they are copied to their outputs, which the core updates in
// place, so the op has no hidden state and runs inside tf.function like any other.
class CompressedAllreduceOp : public CollectiveKernel {
 public:
  explicit CompressedAllreduceOp(OpKernelConstruction* c) : CollectiveKernel(c) {
    OP_REQUIRES_OK(c, c->GetAttr("codec", &codec_));
    OP_REQUIRES_OK(c, c->GetAttr("reduce_op", &reduce_op_));
    OP_REQUIRES_OK(c, c->GetAttr("nan_on_error", &nan_on_error_));
  }

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    const int32_t type = RELAX_REQ_COMPRESSED_ALLREDUCE;
    std::vector<std::string> names(1);
    RELAX_REQUIRES_OK_ASYNC(ctx, ScalarString(ctx->input(3), "compressed_allreduce: tensor_name", &names[0]), done);
    const Tensor& input = ctx->input(0);
    const Tensor& worker = ctx->input(1);
    const Tensor& owner = ctx->input(2);
    // The residuals' sizes are the core's to check (relax.h, "Buffer capacities"): one rule and
    // one message for every binding, announced to the other ranks.
    const bool feedback = worker.NumElements() > 0 || owner.NumElements() > 0;
    Tensor* outputs[3] = {nullptr, nullptr, nullptr};
    for (int i = 0; i < 3; ++i) {
      RELAX_REJECT_IF_ERROR_ASYNC(ctx, ctx->allocate_output(i, ctx->input(i).shape(), &outputs[i]), done, type,
                                  names, process_set_);
    }
    for (int i = 1; i < 3; ++i) {
      const size_t bytes = static_cast<size_t>(ctx->input(i).NumElements()) * sizeof(float);
      if (bytes > 0) std::memcpy(DataPtr(*outputs[i]), DataPtr(ctx->input(i)), bytes);
    }
    auto call = NewCall(ctx, std::move(done), 1);
    call->failure_as_nan = nan_on_error_;  // the residual outputs keep their inputs' values then
    Part& p = call->parts[0];
    p.input = input;
    p.output = *outputs[0];
    p.extra = {*outputs[1], *outputs[2]};
    relax::RequestBuilder r(type, names[0].c_str(), process_set_);
    RELAX_REJECT_IF_ERROR_ASYNC(ctx, SetInput(p, names[0], r), call->done, type, names, process_set_);
    // The op has no input scale: relax_request_init's default (none) stays.
    r.output(DataPtr(p.output), Capacity(p.output))
        .compressed(codec_, reduce_op_)
        .error_feedback(feedback ? static_cast<float*>(DataPtr(p.extra[0])) : nullptr, Capacity(p.extra[0]),
                        feedback && owner.NumElements() > 0 ? static_cast<float*>(DataPtr(p.extra[1])) : nullptr,
                        Capacity(p.extra[1]));  // the core knows the set's chunk and checks the owner's
    std::vector<relax_request_t> requests{r.get()};
    Submit(std::move(call), requests, false);
  }

 private:
  int codec_ = 0;
  int reduce_op_ = RELAX_OP_AVERAGE;
  bool nan_on_error_ = false;
};

class BarrierOp : public CollectiveKernel {
 public:
  explicit BarrierOp(OpKernelConstruction* c) : CollectiveKernel(c) {}

  void ComputeAsync(OpKernelContext* ctx, DoneCallback done) override {
    std::string name;
    RELAX_REQUIRES_OK_ASYNC(ctx, ScalarString(ctx->input(0), "barrier: tensor_name", &name), done);
    auto call = NewCall(ctx, std::move(done), 1);
    std::vector<relax_request_t> requests{relax::RequestBuilder(RELAX_REQ_BARRIER, name.c_str(), process_set_).get()};
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
    std::vector<relax_request_t> requests{relax::RequestBuilder(RELAX_REQ_JOIN, name.c_str(), 0).get()};
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
REGISTER_KERNEL_BUILDER(Name("RelaxlibCompressedAllreduce").Device(DEVICE_CPU), CompressedAllreduceOp);
REGISTER_KERNEL_BUILDER(Name("RelaxlibNeighborAverage").Device(DEVICE_CPU), NeighborAverageOp);
REGISTER_KERNEL_BUILDER(Name("RelaxlibGroupAverage").Device(DEVICE_CPU), GroupAverageOp);
REGISTER_KERNEL_BUILDER(Name("RelaxlibBarrier").Device(DEVICE_CPU), BarrierOp);
REGISTER_KERNEL_BUILDER(Name("RelaxlibJoin").Device(DEVICE_CPU), JoinOp);
REGISTER_KERNEL_BUILDER(Name("RelaxlibSize").Device(DEVICE_CPU), SizeOp);
REGISTER_KERNEL_BUILDER(Name("RelaxlibRank").Device(DEVICE_CPU), RankOp);
REGISTER_KERNEL_BUILDER(Name("RelaxlibLocalSize").Device(DEVICE_CPU), LocalSizeOp);
REGISTER_KERNEL_BUILDER(Name("RelaxlibLocalRank").Device(DEVICE_CPU), LocalRankOp);

}  // namespace
}  // namespace relaxlib_tf
