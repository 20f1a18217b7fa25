#include "api/validate.h"

#include <algorithm>
#include <cmath>

#include "codecs/codec.h"

namespace relax {
namespace {

Status invalid(const std::string& message) { return Status::error(RELAX_ERR_INVALID_ARGUMENT, message); }

}  // namespace

Status make_descriptor(const relax_request_t& r, int world_size, bool has_alloc, Descriptor& d) {
  if (r.type < RELAX_REQ_ALLREDUCE || r.type > RELAX_REQ_GROUP_AVERAGE) {
    return invalid("unknown request type " + std::to_string(r.type));
  }
  d = Descriptor{};
  d.type = r.type;
  d.name = r.name ? r.name : "";
  const std::string what = request_type_name(r.type) + " '" + d.name + "'";
  if (d.name.empty()) return invalid(request_type_name(r.type) + " needs a non-empty name");
  const bool global_only = r.type == RELAX_REQ_JOIN || r.type == RELAX_REQ_ADD_PROCESS_SET ||
                           r.type == RELAX_REQ_REMOVE_PROCESS_SET;
  if (global_only && r.process_set != 0) {
    return Status::error(RELAX_ERR_PROCESS_SET, what + " runs over all ranks; it takes no process set");
  }
  if (r.type == RELAX_REQ_BARRIER || r.type == RELAX_REQ_JOIN) return Status::ok();
  if (r.type == RELAX_REQ_ADD_PROCESS_SET) {
    if (r.nsplits <= 0 || !r.splits) return invalid("a process set needs at least one rank");
    d.splits.assign(r.splits, r.splits + r.nsplits);
    std::sort(d.splits.begin(), d.splits.end());
    for (size_t i = 0; i < d.splits.size(); ++i) {
      if (d.splits[i] < 0 || d.splits[i] >= world_size) {
        return invalid("process set rank " + std::to_string(d.splits[i]) + " is out of range [0, " +
                       std::to_string(world_size) + ")");
      }
      if (i > 0 && d.splits[i] == d.splits[i - 1]) {
        return invalid("process set ranks " + shape_string(d.splits) + " contain duplicates");
      }
    }
    return Status::ok();
  }
  if (r.type == RELAX_REQ_REMOVE_PROCESS_SET) {
    if (r.root_rank == 0) {
      return Status::error(RELAX_ERR_PROCESS_SET, "the global process set (id 0) cannot be removed");
    }
    d.root_rank = r.root_rank;
    return Status::ok();
  }

  if (!dtype_is_valid(r.dtype)) return invalid(what + ": unsupported data type " + dtype_name(r.dtype));
  d.dtype = r.dtype;
  if (r.ndim < 0 || (r.ndim > 0 && !r.shape)) return invalid(what + ": invalid shape (ndim " + std::to_string(r.ndim) + ")");
  d.shape.assign(r.shape, r.shape + r.ndim);
  for (int64_t dim : d.shape) {
    if (dim < 0) return invalid(what + ": negative dimension in shape " + shape_string(d.shape));
  }
  const int64_t numel = d.num_elements();
  if (numel > 0 && !r.input) return invalid(what + ": input buffer is NULL");

  if (r.type == RELAX_REQ_NEIGHBOR_AVERAGE || r.type == RELAX_REQ_GROUP_AVERAGE) {
    const bool floating = r.dtype == RELAX_FLOAT32 || r.dtype == RELAX_FLOAT64;
    if (!floating || (r.codec && r.dtype != RELAX_FLOAT32)) {
      return invalid(what + ": supports float32" + std::string(r.codec ? "" : " and float64") + " tensors");
    }
    if (numel > 0 && !r.output) return invalid(what + ": output buffer is NULL");
    if (r.npeers < 0 || (r.npeers > 0 && (!r.peers || !r.weights))) return invalid(what + ": peers and weights needed");
    std::vector<int64_t> peers(r.peers, r.peers + r.npeers);
    std::vector<int64_t> sorted = peers;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size(); ++i) {
      if (sorted[i] < 0 || sorted[i] >= world_size) {
        return invalid(what + ": rank " + std::to_string(sorted[i]) + " is out of range [0, " +
                       std::to_string(world_size) + ")");
      }
      if (i > 0 && sorted[i] == sorted[i - 1]) return invalid(what + ": ranks " + shape_string(peers) + " repeat");
    }
    for (int32_t k = 0; k < r.npeers; ++k) {
      if (!std::isfinite(r.weights[k])) return invalid(what + ": weights must be finite");
    }
    if (r.type == RELAX_REQ_GROUP_AVERAGE && (r.npeers == 0 || sorted != peers)) {
      return invalid(what + ": group members must be given in ascending order");
    }
    if (r.codec) {
      if (!make_codec(r.codec)) return invalid(what + ": unknown codec " + std::to_string(r.codec));
      if (r.type != RELAX_REQ_NEIGHBOR_AVERAGE) return invalid(what + ": a codec applies to neighbour averages");
      if (numel > 0 && (!r.aux0 || (r.npeers > 0 && !r.aux1))) {
        return invalid(what + ": a compressed neighbour average needs the estimate buffers");
      }
    }
    d.splits = peers;
    d.codec = r.codec;
    return Status::ok();
  }
  if (r.type == RELAX_REQ_COMPRESSED_ALLREDUCE) {
    if (r.dtype != RELAX_FLOAT32) return invalid(what + ": compressed all-reduce supports float32 tensors only");
    if (!make_codec(r.codec)) return invalid(what + ": unknown codec " + std::to_string(r.codec));
    if (r.reduce_op != RELAX_OP_AVERAGE && r.reduce_op != RELAX_OP_SUM) {
      return invalid(what + ": compressed all-reduce supports Average and Sum");
    }
    if (numel > 0 && !r.output) return invalid(what + ": output buffer is NULL");
    d.reduce_op = r.reduce_op;
    d.codec = r.codec;
    // Error feedback is on when the worker memory is given; the owner memory then holds this
    // rank's chunk and may be NULL only when that chunk is empty (checked at submission).
    d.flags = r.aux0 ? (Descriptor::kWorkerError | Descriptor::kOwnerError) : 0;
    return Status::ok();
  }
  const bool reduces = r.type == RELAX_REQ_ALLREDUCE || r.type == RELAX_REQ_REDUCESCATTER;
  if (reduces) {
    if (r.reduce_op == RELAX_OP_ADASUM) {
      return invalid(what + ": the Adasum reduction is not implemented in relaxlib; use Average or Sum.");
    }
    if (r.reduce_op < RELAX_OP_AVERAGE || r.reduce_op > RELAX_OP_PRODUCT) {
      return invalid(what + ": unknown reduction op " + std::to_string(r.reduce_op));
    }
    if (r.dtype == RELAX_BOOL) return invalid(what + ": cannot reduce tensors of type bool");
    if (!std::isfinite(r.prescale) || !std::isfinite(r.postscale)) {
      return invalid(what + ": prescale and postscale factors must be finite");
    }
    d.reduce_op = r.reduce_op;
    d.prescale = r.prescale;
    d.postscale = r.postscale;
  }
  if ((r.type == RELAX_REQ_ALLREDUCE || r.type == RELAX_REQ_BROADCAST) && numel > 0 && !r.output) {
    return invalid(what + ": output buffer is NULL");
  }
  if ((r.type == RELAX_REQ_ALLGATHER || r.type == RELAX_REQ_ALLTOALL || r.type == RELAX_REQ_REDUCESCATTER)) {
    if (d.shape.empty()) return invalid(what + ": needs a tensor with at least one dimension, got a scalar");
    if (!has_alloc && !r.output) return invalid(what + ": needs an output buffer or an allocation callback");
  }
  if (r.type == RELAX_REQ_BROADCAST) {
    if (r.root_rank < 0 || r.root_rank >= world_size) {
      return invalid(what + ": root rank " + std::to_string(r.root_rank) + " is out of range [0, " +
                     std::to_string(world_size) + ")");
    }
    d.root_rank = r.root_rank;
  }
  if (r.type == RELAX_REQ_ALLTOALL) {
    if (r.nsplits == 0) {
      if (d.dim0() % world_size != 0) {
        return invalid(what + ": without splits the first dimension (" + std::to_string(d.dim0()) +
                       ") must be divisible by the number of ranks (" + std::to_string(world_size) + ")");
      }
    } else {
      if (r.nsplits != world_size || !r.splits) {
        return invalid(what + ": splits must have one entry per rank (" + std::to_string(world_size) + "), got " +
                       std::to_string(r.nsplits));
      }
      d.splits.assign(r.splits, r.splits + r.nsplits);
      int64_t sum = 0;
      for (int64_t s : d.splits) {
        if (s < 0) return invalid(what + ": negative entry in splits " + shape_string(d.splits));
        sum += s;
      }
      if (sum != d.dim0()) {
        return invalid(what + ": splits " + shape_string(d.splits) + " sum to " + std::to_string(sum) +
                       " but the first dimension is " + std::to_string(d.dim0()));
      }
    }
  }
  if (r.type == RELAX_REQ_REDUCESCATTER && r.ncounts > 0) {
    if (r.ncounts != world_size || !r.recv_counts) {
      return invalid(what + ": recv_counts must have one entry per rank");
    }
    d.recv_counts.assign(r.recv_counts, r.recv_counts + r.ncounts);
    int64_t sum = 0;
    for (int64_t c : d.recv_counts) {
      if (c < 0) return invalid(what + ": negative entry in recv_counts");
      sum += c;
    }
    if (sum != numel) {
      return invalid(what + ": recv_counts sum to " + std::to_string(sum) + " but the tensor has " +
                     std::to_string(numel) + " elements");
    }
  }
  return Status::ok();
}

}  // namespace relax
