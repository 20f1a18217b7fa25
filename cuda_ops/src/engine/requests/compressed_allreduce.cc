// compressed_allreduce: float32 sum or average through a codec (collectives/compressed.h), with
// error feedback when the caller lends the residual memory: the worker's (the whole tensor) and
// the owner's (the chunk this rank reduces), and optionally the factored per-element step scale
// (collectives/scaled_compressed.h). Its input may be tensors laid end to end, and scaled first.
#include <cmath>
#include <cstdio>
#include <memory>

#include "codecs/codec.h"
#include "collectives/compressed.h"
#include "collectives/scaled_compressed.h"
#include "engine/requests/kind_support.h"
#include "util/flush_denormals.h"

namespace relax {
namespace {

// Checks the step scale's arguments against the tensor and keeps them: the factors, floor and
// decay in the descriptor (every rank must agree), the state buffers in `local`; writes the bytes each
// statistics buffer must hold.
Status parse_step_scale(const relax_step_scale_args_t& args, LocalRequest& local, int64_t* statistics_bytes) {
  std::vector<ScaleFactor> factors;
  Status s = scale_factors(args.shapes, args.nfactors, factors);
  if (!s.is_ok()) return kinds::fail(local, s.message);
  Descriptor& d = local.desc;
  if (scale_elements(factors) != d.num_elements()) {
    return kinds::fail(local, "the step scale's parameters hold " + std::to_string(scale_elements(factors)) +
                                  " elements, the tensor " + std::to_string(d.num_elements()));
  }
  if (!(args.floor > 0) || !std::isfinite(args.floor)) {
    return kinds::fail(local, "the step scale's floor must be positive and finite, not " + std::to_string(args.floor));
  }
  if (!(args.decay >= 0 && args.decay < 1)) {
    return kinds::fail(local, "the step scale's decay must be in [0, 1), not " + std::to_string(args.decay));
  }
  if (d.num_elements() > 0 && !args.smoothed) {
    return kinds::fail(local, "the step scale's state buffer (smoothed statistics) is NULL");
  }
  *statistics_bytes = kinds::float_bytes(scale_statistics_count(factors));
  d.scale_shapes.assign(args.shapes, args.shapes + 2 * static_cast<ptrdiff_t>(args.nfactors));
  d.scale_floor = args.floor;
  d.scale_decay = args.decay;
  local.scale_statistics = args.statistics;
  local.scale_smoothed = args.smoothed;
  return Status::ok();
}

// The buffer rule for the error-feedback residuals: the worker's holds the tensor, the owner's this
// rank's chunk (`own` elements), which depends on the process set's size and this rank's place.
// Each buffer given is checked on its own: the collective touches whichever pointer it holds.
Status check_residuals(const relax_compressed_allreduce_args_t& args, const SubmitContext& ctx, int64_t own,
                       const LocalRequest& local) {
  const int64_t count = local.desc.num_elements();
  Status s = Status::ok();
  if (args.worker_error) {
    s = kinds::require_capacity(local, "worker residual (worker_error)", kinds::float_bytes(count),
                                args.worker_error_bytes, std::to_string(count) + " floats, the tensor's");
  }
  if (!s.is_ok() || !args.owner_error) return s;
  return kinds::require_capacity(local, "owner residual (owner_error)", kinds::float_bytes(own), args.owner_error_bytes,
                                 std::to_string(own) + " floats: set rank " + std::to_string(ctx.set_rank) +
                                     "'s chunk of " + std::to_string(count) + " elements over a process set of " +
                                     std::to_string(ctx.set_size()) + " ranks");
}

// The buffer rule for the step scale's state: relax_scale_statistics' count floats in each.
Status check_statistics(const relax_step_scale_args_t& args, int64_t needed, const LocalRequest& local) {
  const std::string detail = "relax_scale_statistics' count for " + std::to_string(args.nfactors) + " parameters";
  Status s = Status::ok();
  if (args.smoothed) {
    s = kinds::require_capacity(local, "step scale's smoothed statistics (smoothed)", needed, args.smoothed_bytes,
                                detail);
  }
  if (s.is_ok() && args.statistics) {
    s = kinds::require_capacity(local, "step scale's statistics (statistics)", needed, args.statistics_bytes, detail);
  }
  return s;
}

Status parse(const relax_request_t& r, const SubmitContext& ctx, LocalRequest& local) {
  const relax_compressed_allreduce_args_t& args = r.args.compressed_allreduce;
  Descriptor& d = local.desc;
  if (d.dtype != RELAX_FLOAT32) return kinds::fail(local, "compressed all-reduce supports float32 tensors only");
  if (!make_codec(args.codec)) return kinds::fail(local, "unknown codec " + std::to_string(args.codec));
  if (args.reduce_op != RELAX_OP_AVERAGE && args.reduce_op != RELAX_OP_SUM) {
    return kinds::fail(local, "compressed all-reduce supports Average and Sum");
  }
  Status s = kinds::require_output(local);
  if (!s.is_ok()) return s;
  // This rank's chunk, which it reduces: its share of the process set (not of the world).
  const int64_t own = even_counts(d.num_elements(), ctx.set_size())[static_cast<size_t>(ctx.set_rank)];
  if (args.worker_error && !args.owner_error) {
    if (own > 0) {
      return kinds::fail(local, "error feedback needs the owner memory (" + std::to_string(own) +
                            " floats) as well as the worker memory");
    }
  }
  // Error feedback is on with the worker memory only; the collective would still write this
  // rank's chunk into an owner memory given alone, so that combination is refused, not ignored.
  if (args.owner_error && !args.worker_error) {
    return kinds::fail(local, "the owner residual (owner_error) is given without the worker residual "
                              "(worker_error): error feedback needs both, or neither");
  }
  int64_t statistics_bytes = 0;
  if (args.step_scale) {
    s = parse_step_scale(*args.step_scale, local, &statistics_bytes);
    if (!s.is_ok()) return s;
  }
  const float prescale = static_cast<float>(args.prescale);
  if (!std::isfinite(prescale)) {
    char value[32];
    std::snprintf(value, sizeof value, "%.9g", args.prescale);
    return kinds::fail(local, std::string("prescale must be finite in float32 (1.0 = none), not ") + value);
  }
  local.prescale = prescale;
  if (args.step_scale && (prescale != 1.0f || !local.input_pieces.empty())) {
    return kinds::fail(local, "the step scale reads its input as one buffer as it is: no prescale, no inputs laid "
                              "end to end");
  }
  d.reduce_op = args.reduce_op;
  d.codec = args.codec;
  // Error feedback is on when the worker memory is given; the owner memory may then be NULL only
  // when this rank's chunk is empty (checked above).
  d.flags = args.worker_error ? (Descriptor::kWorkerError | Descriptor::kOwnerError) : 0;
  local.worker_error = args.worker_error;
  local.owner_error = args.owner_error;
  s = check_residuals(args, ctx, own, local);
  if (!s.is_ok() || !args.step_scale) return s;
  return check_statistics(*args.step_scale, statistics_bytes, local);
}

std::string codec_of(const Descriptor& d) { return codec_name(d.codec); }

std::string feedback_of(const Descriptor& d) {
  return std::string((d.flags & Descriptor::kWorkerError) ? "worker" : "no worker") +
         ((d.flags & Descriptor::kOwnerError) ? "+owner error" : "+no owner error");
}

// What ranks must agree on about the step scale: its floor and decay, the parameters' shapes (the
// first three) and a digest of all of them.
std::string step_scale_of(const Descriptor& d) {
  if (d.scale_shapes.empty()) return "none";
  uint64_t digest = 1469598103934665603ull;  // FNV-1a over the shapes
  for (int64_t v : d.scale_shapes) {
    for (int b = 0; b < 8; ++b) digest = (digest ^ ((static_cast<uint64_t>(v) >> (8 * b)) & 0xff)) * 1099511628211ull;
  }
  std::string text = std::to_string(d.scale_shapes.size() / 2) + " parameters (";
  for (size_t p = 0; p < d.scale_shapes.size() / 2 && p < 3; ++p) {
    text += (p ? ", " : "") + std::to_string(d.scale_shapes[2 * p]) + "x" + std::to_string(d.scale_shapes[2 * p + 1]);
  }
  char tail[128];
  std::snprintf(tail, sizeof tail, "%s; digest %016llx), floor %.17g, decay %.17g", d.scale_shapes.size() > 6 ? ", ..." : "",
                static_cast<unsigned long long>(digest), d.scale_floor, d.scale_decay);
  return text + tail;
}

Status run(RunContext& ctx, ExecItem& item, std::vector<int64_t>&) {
  const Descriptor& d = item.tensor->first();
  std::unique_ptr<Codec> codec = make_codec(d.codec);
  const FlushDenormals flush;
  CompressedAllreduce op;
  op.input = static_cast<const float*>(item.local->input);
  op.pieces = item.local->input_pieces;
  op.prescale = item.local->prescale;
  op.output = static_cast<float*>(item.local->output);
  op.count = d.num_elements();
  op.average = d.reduce_op == RELAX_OP_AVERAGE;
  op.worker_error = item.local->worker_error;
  op.owner_error = item.local->owner_error;
  Status status;
  if (d.scale_shapes.empty()) {
    status = compressed_allreduce(ctx.collectives, *codec, op, ctx.world_ranks, ctx.work_buffer);
  } else {
    StepScale scale;
    status = scale_factors(d.scale_shapes.data(), static_cast<int32_t>(d.scale_shapes.size() / 2), scale.factors);
    scale.floor = static_cast<float>(d.scale_floor);
    scale.decay = d.scale_decay;
    scale.statistics = item.local->scale_statistics;
    scale.smoothed = item.local->scale_smoothed;
    if (status.is_ok()) {
      status = scaled_compressed_allreduce(ctx.collectives, *codec, op, scale, ctx.world_ranks, ctx.work_buffer);
    }
  }
  if (!status.is_ok()) status.message = "compressed_allreduce '" + d.name + "': " + status.message;
  return status;
}

const RequestKindRegistration kCompressedAllreduce({
    RELAX_REQ_COMPRESSED_ALLREDUCE, "compressed_allreduce", Lane::kNegotiated, /*takes_tensor=*/true,
    /*global=*/false, /*fuses=*/false, parse,
    {{"shapes", kinds::shape_of},
     {"reduction ops", kinds::reduce_op_of},
     {"codecs", codec_of},
     {"error-feedback settings", feedback_of},
     {"step scales", step_scale_of}},
    kinds::refuse_when_joined, run, [](const relax_request_t& r) { return &r.args.compressed_allreduce.inputs; }});

}  // namespace
}  // namespace relax
