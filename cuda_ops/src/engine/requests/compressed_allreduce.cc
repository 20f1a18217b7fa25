// compressed_allreduce: float32 sum or average through a codec (collectives/compressed.h), with
// error feedback when the caller lends the residual memory: the worker's (the whole tensor) and
// the owner's (the chunk this rank reduces).
#include <memory>

#include "codecs/codec.h"
#include "collectives/compressed.h"
#include "engine/requests/kind_support.h"

namespace relax {
namespace {

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
  if (args.worker_error && !args.owner_error) {
    const int64_t parts = ctx.set_size();
    const int64_t own = d.num_elements() / parts + (ctx.set_rank < d.num_elements() % parts ? 1 : 0);
    if (own > 0) {
      return kinds::fail(local, "error feedback needs the owner memory (" + std::to_string(own) +
                            " floats) as well as the worker memory");
    }
  }
  d.reduce_op = args.reduce_op;
  d.codec = args.codec;
  // Error feedback is on when the worker memory is given; the owner memory may then be NULL only
  // when this rank's chunk is empty (checked above).
  d.flags = args.worker_error ? (Descriptor::kWorkerError | Descriptor::kOwnerError) : 0;
  local.worker_error = args.worker_error;
  local.owner_error = args.owner_error;
  return Status::ok();
}

std::string codec_of(const Descriptor& d) { return codec_name(d.codec); }

std::string feedback_of(const Descriptor& d) {
  return std::string((d.flags & Descriptor::kWorkerError) ? "worker" : "no worker") +
         ((d.flags & Descriptor::kOwnerError) ? "+owner error" : "+no owner error");
}

Status run(RunContext& ctx, ExecItem& item, std::vector<int64_t>&) {
  const Descriptor& d = item.tensor->first();
  std::unique_ptr<Codec> codec = make_codec(d.codec);
  CompressedAllreduce op;
  op.input = static_cast<const float*>(item.local->input);
  op.output = static_cast<float*>(item.local->output);
  op.count = d.num_elements();
  op.average = d.reduce_op == RELAX_OP_AVERAGE;
  op.worker_error = item.local->worker_error;
  op.owner_error = item.local->owner_error;
  Status status = compressed_allreduce(ctx.collectives, *codec, op, ctx.world_ranks, ctx.work_buffer);
  if (!status.is_ok()) status.message = "compressed_allreduce '" + d.name + "': " + status.message;
  return status;
}

const RequestKindRegistration kCompressedAllreduce({
    RELAX_REQ_COMPRESSED_ALLREDUCE, "compressed_allreduce", Lane::kNegotiated, /*takes_tensor=*/true,
    /*global=*/false, /*fuses=*/false, parse,
    {{"shapes", kinds::shape_of},
     {"reduction ops", kinds::reduce_op_of},
     {"codecs", codec_of},
     {"error-feedback settings", feedback_of}},
    kinds::refuse_when_joined, run});

}  // namespace
}  // namespace relax
