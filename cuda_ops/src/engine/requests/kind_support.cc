#include "engine/requests/kind_support.h"

#include <algorithm>
#include <cstdint>
#include <cmath>

#include "util/text.h"

namespace relax {
namespace kinds {

Status invalid(const std::string& message) { return Status::error(RELAX_ERR_INVALID_ARGUMENT, message); }

std::string describe(const LocalRequest& local) {
  return request_type_name(local.desc.type) + " '" + local.desc.name + "'";
}

Status fail(const LocalRequest& local, const std::string& detail) { return invalid(describe(local) + ": " + detail); }

Status parse_reduction(LocalRequest& local, const relax_reduce_args_t& args) {
  Descriptor& d = local.desc;
  if (args.reduce_op == RELAX_OP_ADASUM) {
    return fail(local, "the Adasum reduction is supported by allreduce only (as in Horovod); use Average or Sum.");
  }
  if (args.reduce_op < RELAX_OP_AVERAGE || args.reduce_op > RELAX_OP_PRODUCT) {
    return fail(local, "unknown reduction op " + std::to_string(args.reduce_op));
  }
  if (d.dtype == RELAX_BOOL) return fail(local, "cannot reduce tensors of type bool");
  if (!std::isfinite(args.prescale) || !std::isfinite(args.postscale)) {
    return fail(local, "prescale and postscale factors must be finite");
  }
  d.reduce_op = args.reduce_op;
  d.prescale = args.prescale;
  d.postscale = args.postscale;
  return Status::ok();
}

Status require_output(LocalRequest& local) {
  if (local.desc.num_elements() > 0 && !local.output) return fail(local, "output buffer is NULL");
  local.output_needed = byte_size(local.desc);
  return Status::ok();
}

Status require_capacity(const LocalRequest& local, const std::string& buffer, int64_t needed, int64_t capacity,
                        const std::string& detail) {
  if (capacity >= needed) return Status::ok();  // the message is built only on failure
  return require_capacity(describe(local), buffer, needed, capacity, detail);
}

Status require_capacity(const std::string& who, const std::string& buffer, int64_t needed, int64_t capacity,
                        const std::string& detail) {
  // An unset capacity (0) is refused like any other short one: it never means "unknown, skip".
  if (capacity >= needed) return Status::ok();
  return invalid(who + ": the " + buffer + " holds " + std::to_string(capacity) + " bytes but the operation needs " +
                         std::to_string(needed) + " bytes" + (detail.empty() ? "" : " (" + detail + ")") +
                         "; a buffer must hold what the operation reads or writes in it");
}

int64_t saturating_mul(int64_t a, int64_t b) {
  int64_t product = 0;
  return checked_mul(a, b, product) ? product : INT64_MAX;
}

int64_t float_bytes(int64_t count) { return saturating_mul(count, static_cast<int64_t>(sizeof(float))); }

void* output_within_capacity(RunContext& ctx, ExecItem& item, const std::vector<int64_t>& shape,
                             std::vector<uint8_t>& fallback, int64_t bytes, Status& refused) {
  LocalRequest* local = item.local;
  if (local && !local->alloc && local->output) {
    refused = require_capacity(*local, "output buffer", bytes, local->output_capacity,
                               "known once every rank's part is: " + shape_string(shape));
    if (!refused.is_ok()) {
      fallback.resize(static_cast<size_t>(bytes));
      return fallback.data();
    }
  }
  return ctx.output_for(item, shape, fallback, bytes);
}

Status require_rows(const SubmitContext& ctx, const LocalRequest& local) {
  if (local.desc.shape.empty()) return fail(local, "needs a tensor with at least one dimension, got a scalar");
  if (!ctx.has_alloc && !local.output) return fail(local, "needs an output buffer or an allocation callback");
  return Status::ok();
}

Status parse_peers(const SubmitContext& ctx, int32_t count, const int32_t* peers, const double* weights,
                   bool compressed, LocalRequest& local) {
  const int32_t dtype = local.desc.dtype;
  const bool floating = dtype == RELAX_FLOAT32 || dtype == RELAX_FLOAT64;
  if (!floating || (compressed && dtype != RELAX_FLOAT32)) {
    return fail(local, "supports float32" + std::string(compressed ? "" : " and float64") + " tensors");
  }
  Status s = require_output(local);
  if (!s.is_ok()) return s;
  if (count < 0 || (count > 0 && (!peers || !weights))) return fail(local, "peers and weights needed");
  std::vector<int64_t> listed(peers, peers + count);
  std::vector<int64_t> sorted = listed;
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] < 0 || sorted[i] >= ctx.world_size) {
      return fail(local, "rank " + std::to_string(sorted[i]) + " is out of range [0, " +
                     std::to_string(ctx.world_size) + ")");
    }
    if (i > 0 && sorted[i] == sorted[i - 1]) return fail(local, "ranks " + shape_string(listed) + " repeat");
  }
  for (int32_t k = 0; k < count; ++k) {
    if (!std::isfinite(weights[k])) return fail(local, "weights must be finite");
  }
  local.desc.splits = listed;
  local.direct.peers.assign(peers, peers + count);
  local.direct.weights.assign(weights, weights + count);
  return Status::ok();
}

int32_t reduction_of(int32_t op) { return op == RELAX_OP_AVERAGE ? RELAX_OP_SUM : op; }

double postscale_of(const Descriptor& d, int size) {
  return d.reduce_op == RELAX_OP_AVERAGE ? d.postscale / static_cast<double>(size) : d.postscale;
}

std::vector<int64_t> with_dim0(const std::vector<int64_t>& shape, int64_t dim0) {
  std::vector<int64_t> out = shape;
  if (out.empty()) out.push_back(dim0);
  else out[0] = dim0;
  return out;
}

int64_t byte_size(const Descriptor& d) { return d.num_elements() * static_cast<int64_t>(dtype_size(d.dtype)); }

std::string reduce_op_of(const Descriptor& d) { return reduce_op_name(d.reduce_op); }
std::string prescale_of(const Descriptor& d) { return std::to_string(d.prescale); }
std::string postscale_text_of(const Descriptor& d) { return std::to_string(d.postscale); }
std::string shape_of(const Descriptor& d) { return shape_string(d.shape); }
std::string ndim_of(const Descriptor& d) { return std::to_string(d.shape.size()); }
std::string row_shape_of(const Descriptor& d) {
  return shape_string(d.shape.empty() ? d.shape : std::vector<int64_t>(d.shape.begin() + 1, d.shape.end()));
}

std::vector<AgreementField> reduction_agreement() {
  return {{"reduction ops", reduce_op_of},
          {"prescale factors", prescale_of},
          {"postscale factors", postscale_text_of},
          {"shapes", shape_of}};
}

Status gather_when_joined(const ResponseTensor& t, const JoinedContext& ctx) {
  if (ctx.gather_nothing) return Status::ok();
  return invalid(request_type_name(t.first().type) + " " + ctx.quoted + " cannot run while ranks " +
                 rank_list(ctx.absent) +
                 " have joined (as in Horovod; RELAX_JOINED_RANKS=contribute-nothing lets them contribute no rows "
                 "and receive the result).");
}

Status refuse_when_joined(const ResponseTensor& t, const JoinedContext& ctx) {
  return invalid(request_type_name(t.first().type) + " " + ctx.quoted + " is not supported while ranks " +
                 rank_list(ctx.absent) + " have joined.");
}

}  // namespace kinds
}  // namespace relax
