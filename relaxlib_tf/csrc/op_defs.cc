// TensorFlow glue: the Relaxlib* op definitions (inputs, attrs, outputs, shape functions). The
// kernels are in kernels.cc.
#include <functional>
#include <string>

#include "bridge.h"
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace relaxlib_tf {
namespace {

using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

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

// One tensor and its scalar name: the output is the input with an unknown dim 0.
std::function<Status(InferenceContext*)> Dim0Fn(const char* what) {
  return [what](InferenceContext* c) -> Status {
    TF_RETURN_IF_ERROR(ScalarNameAt(c, 1));
    return Dim0Unknown(c, 0, 0, what);
  };
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

#define RELAX_REDUCE_TYPES "{float, double, half, bfloat16, int32, int64, int16, uint16, uint8, int8}"
#define RELAX_ALL_TYPES "{float, double, half, bfloat16, int32, int64, int16, uint16, uint8, int8, bool}"

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
    .SetShapeFn(Dim0Fn("allgather"))
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
    .SetShapeFn(Dim0Fn("reducescatter"))
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

REGISTER_OP("RelaxlibCompressedAllreduce")
    .Attr("codec: int")
    .Attr("reduce_op: int")
    .Attr("process_set: int = 0")
    .Attr("nan_on_error: bool = false")
    .Input("tensor: float")
    .Input("worker_error: float")
    .Input("owner_error: float")
    .Input("tensor_name: string")
    .Output("output: float")
    .Output("new_worker_error: float")
    .Output("new_owner_error: float")
    .SetShapeFn([](InferenceContext* c) -> Status {
      TF_RETURN_IF_ERROR(ScalarNameAt(c, 3));
      for (int i = 0; i < 3; ++i) c->set_output(i, c->input(i));
      return Status();
    })
    .Doc("Compressed all-reduce (average or sum) of a float32 tensor through `codec` (relaxlib). With "
         "error feedback the residuals (worker: one per element; owner: this rank's chunk) come in as "
         "inputs and leave updated as outputs; empty residual inputs turn error feedback off. With "
         "nan_on_error a failed all-reduce outputs NaN (the residuals unchanged) instead of failing.");

// Shapes of the direct averages' rank lists and weights: vectors of one length.
Status PeersAndWeights(InferenceContext* c, int peers, int weights) {
  ShapeHandle ranks, values;
  TF_RETURN_IF_ERROR(c->WithRank(c->input(peers), 1, &ranks));
  TF_RETURN_IF_ERROR(c->WithRank(c->input(weights), 1, &values));
  return c->Merge(ranks, values, &ranks);
}

REGISTER_OP("RelaxlibNeighborAverage")
    .Attr("T: {float, double}")
    .Attr("codec: int = 0")
    .Attr("consensus_step: float = 1.0")
    .Input("tensor: T")
    .Input("peers: int32")
    .Input("weights: double")
    .Input("self_weight: double")
    .Input("estimate_self: float")
    .Input("estimate_peers: float")
    .Input("tensor_name: string")
    .Output("output: T")
    .Output("new_estimate_self: float")
    .Output("new_estimate_peers: float")
    .SetShapeFn([](InferenceContext* c) -> Status {
      TF_RETURN_IF_ERROR(ScalarNameAt(c, 6));
      TF_RETURN_IF_ERROR(ScalarNameAt(c, 3));
      TF_RETURN_IF_ERROR(PeersAndWeights(c, 1, 2));
      c->set_output(0, c->input(0));
      c->set_output(1, c->input(4));
      c->set_output(2, c->input(5));
      return Status();
    })
    .Doc("self_weight * tensor + sum_k weights[k] * tensor@peers[k] over world ranks, point to point, not "
         "negotiated (relaxlib). With a codec: CHOCO-gossip on the estimates, which come in as inputs "
         "and leave updated as outputs (empty without a codec).");

REGISTER_OP("RelaxlibGroupAverage")
    .Attr("T: {float, double}")
    .Input("tensor: T")
    .Input("members: int32")
    .Input("weights: double")
    .Input("tensor_name: string")
    .Output("output: T")
    .SetShapeFn([](InferenceContext* c) -> Status {
      TF_RETURN_IF_ERROR(ScalarNameAt(c, 3));
      TF_RETURN_IF_ERROR(PeersAndWeights(c, 1, 2));
      c->set_output(0, c->input(0));
      return Status();
    })
    .Doc("sum_k weights[k] * tensor@members[k] over a group of world ranks (ascending, including this "
         "one) on a cached sub-communicator, not negotiated (relaxlib's partial all-reduce).");

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

}  // namespace
}  // namespace relaxlib_tf
