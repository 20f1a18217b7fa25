// allgather: every rank's tensor concatenated along dim 0 in rank order; dim 0 may differ.
#include "engine/requests/kind_support.h"

namespace relax {
namespace {

Status parse(const relax_request_t&, const SubmitContext& ctx, LocalRequest& local) {
  return kinds::require_rows(ctx, local);
}

Status run(RunContext& ctx, ExecItem& item, std::vector<int64_t>&) {
  const Descriptor& d = item.tensor->first();
  const size_t esize = dtype_size(d.dtype);
  const int64_t row = d.row_elements();
  std::vector<int64_t> counts;
  int64_t rows = 0;
  for (const auto& rank_desc : item.tensor->per_rank) {
    const int64_t dim0 = rank_desc ? rank_desc->dim0() : 0;  // a joined rank contributes no rows
    counts.push_back(dim0 * row);  // exact: each rank's own shape passed checked_tensor_size
    if (!checked_add(rows, dim0, rows)) rows = -1;
    if (rows < 0) break;
  }
  // Every rank's tensor fits in int64 bytes, their concatenation need not: checked on the peers'
  // dims every rank holds alike, so all of them fail this request instead of asking the
  // allocation callback for a negative shape.
  int64_t bytes = 0;
  int64_t elements = 0;
  if (rows < 0 || !checked_mul(rows, row, elements) || !checked_mul(elements, static_cast<int64_t>(esize), bytes)) {
    return Status::error(RELAX_ERR_INVALID_ARGUMENT, "allgather '" + d.name +
                                                         "': the ranks' rows together are more than fit in int64 "
                                                         "bytes of output (rows of shape " +
                                                         kinds::row_shape_of(d) + ")");
  }
  std::vector<uint8_t> fallback;
  Status refused;
  void* out = kinds::output_within_capacity(ctx, item, kinds::with_dim0(d.shape, rows), fallback, bytes, refused);
  if (!out && bytes > 0) {
    return Status::error(RELAX_ERR_INTERNAL, "could not allocate the allgather output for '" + d.name + "'");
  }
  Status s = ctx.collectives.allgatherv(item.local ? item.local->input : nullptr, out, counts, esize);
  return s.is_ok() ? refused : s;
}

const RequestKindRegistration kAllgather({
    RELAX_REQ_ALLGATHER, "allgather", Lane::kNegotiated, /*takes_tensor=*/true, /*global=*/false, /*fuses=*/false,
    parse,
    {{"tensor ranks (number of dimensions)", kinds::ndim_of}, {"shapes beyond the first dimension", kinds::row_shape_of}},
    kinds::gather_when_joined, run});

}  // namespace
}  // namespace relax
