// reducescatter: rank i receives block i of the reduction. Blocks split dim 0 as evenly as
// possible (the first blocks take the extra rows), or the flat tensor by `recv_counts`. The
// tensor may be several laid end to end, read where they lie.
#include <cstring>

#include "collectives/reduce.h"
#include "engine/requests/kind_support.h"

namespace relax {
namespace {

// The bytes of this rank's block, which a caller's own output (no allocation callback) must hold
// (the buffer rule, api/buffer_rule.h): its recv_counts entry, or its share of dim 0's rows.
Status record_output_size(const SubmitContext& ctx, LocalRequest& local) {
  if (ctx.has_alloc) return Status::ok();  // the callback allocates the block's shape
  const Descriptor& d = local.desc;
  const size_t me = static_cast<size_t>(ctx.set_rank);
  const int64_t elements = d.recv_counts.empty() ? even_counts(d.dim0(), ctx.set_size())[me] * d.row_elements()
                                                 : d.recv_counts[me];
  local.output_needed = elements * static_cast<int64_t>(dtype_size(d.dtype));
  return Status::ok();
}

// The tensors a request laid end to end (relax_reducescatter_args_t::inputs), checked against its
// flat shape.
Status parse(const relax_request_t& r, const SubmitContext& ctx, LocalRequest& local) {
  const relax_reducescatter_args_t& args = r.args.reducescatter;
  Descriptor& d = local.desc;
  Status s = kinds::parse_reduction(local, args.reduce);
  if (!s.is_ok()) return s;
  s = kinds::require_rows(ctx, local);
  if (!s.is_ok()) return s;
  if (args.ncounts <= 0) return record_output_size(ctx, local);
  if (args.ncounts != ctx.set_size() || !args.recv_counts) {
    return kinds::fail(local, "recv_counts must have one entry per rank");
  }
  d.recv_counts.assign(args.recv_counts, args.recv_counts + args.ncounts);
  int64_t sum = 0;
  for (int64_t c : d.recv_counts) {
    if (c < 0) return kinds::fail(local, "negative entry in recv_counts");
    if (!checked_add(sum, c, sum)) {  // entries near INT64_MAX would wrap the sum to the right total
      return kinds::fail(local, "recv_counts " + shape_string(d.recv_counts) + " overflow int64 when summed");
    }
  }
  if (sum != d.num_elements()) {
    return kinds::fail(local, "recv_counts sum to " + std::to_string(sum) + " but the tensor has " +
                          std::to_string(d.num_elements()) + " elements");
  }
  return record_output_size(ctx, local);
}

std::string recv_counts_of(const Descriptor& d) { return shape_string(d.recv_counts); }

Status run(RunContext& ctx, ExecItem& item, std::vector<int64_t>&) {
  const Descriptor& d = item.tensor->first();
  const size_t esize = dtype_size(d.dtype);
  const int size = ctx.collectives.size();
  const int me = ctx.collectives.rank();
  const int32_t op = kinds::reduction_of(d.reduce_op);
  const int64_t numel = d.num_elements();
  std::vector<int64_t> counts;
  std::vector<int64_t> out_shape;
  if (!d.recv_counts.empty()) {
    counts = d.recv_counts;
    out_shape = {counts[static_cast<size_t>(me)]};
  } else {
    const std::vector<int64_t> rows = even_counts(d.dim0(), size);
    for (int64_t r : rows) counts.push_back(r * d.row_elements());
    out_shape = kinds::with_dim0(d.shape, rows[static_cast<size_t>(me)]);
  }
  std::vector<uint8_t>& work = ctx.work_buffer;
  if (work.size() < static_cast<size_t>(numel) * esize) work.resize(static_cast<size_t>(numel) * esize);
  std::vector<Piece> inputs;
  if (!item.local) {
    fill_identity(work.data(), numel, d.dtype, op);  // a joined rank contributes nothing
    inputs = {Piece{work.data(), nullptr, numel * static_cast<int64_t>(esize)}};
  } else if (!item.local->input_pieces.empty()) {
    inputs = item.local->input_pieces;
  } else {
    inputs = {Piece{item.local->input, nullptr, numel * static_cast<int64_t>(esize)}};
  }
  if (item.local && d.prescale != 1.0) {  // the inputs must not be modified: scale a copy
    uint8_t* at = work.data();
    for (const Piece& input : inputs) {
      if (input.bytes > 0) std::memcpy(at, input.in, static_cast<size_t>(input.bytes));
      at += input.bytes;
    }
    scale_buffer(work.data(), numel, d.dtype, d.prescale);
    inputs = {Piece{work.data(), nullptr, numel * static_cast<int64_t>(esize)}};
  }
  const int64_t out_bytes = counts[static_cast<size_t>(me)] * static_cast<int64_t>(esize);
  std::vector<uint8_t> fallback;
  void* out = ctx.output_for(item, out_shape, fallback, out_bytes);
  if (!out && out_bytes > 0) {
    return Status::error(RELAX_ERR_INTERNAL, "could not allocate the reducescatter output for '" + d.name + "'");
  }
  return ctx.collectives.reduce_scatter(inputs, work.data(), counts, d.dtype, op, kinds::postscale_of(d, size), out);
}

std::vector<AgreementField> agreement() {
  std::vector<AgreementField> fields = kinds::reduction_agreement();
  fields.push_back({"receive counts", recv_counts_of});
  return fields;
}

const RequestKindRegistration kReducescatter({
    RELAX_REQ_REDUCESCATTER, "reducescatter", Lane::kNegotiated, /*takes_tensor=*/true, /*global=*/false,
    /*fuses=*/false, parse, agreement(), /*check_joined=*/nullptr, run,
    [](const relax_request_t& r) { return &r.args.reducescatter.inputs; }});

}  // namespace
}  // namespace relax
