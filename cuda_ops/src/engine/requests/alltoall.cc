// alltoall: dim-0 rows of each rank's tensor sent to each rank (`splits`, or an equal split);
// the handle reports how many rows came from each rank.
#include "engine/requests/kind_support.h"

namespace relax {
namespace {

Status parse(const relax_request_t& r, const SubmitContext& ctx, LocalRequest& local) {
  Status s = kinds::require_rows(ctx, local);
  if (!s.is_ok()) return s;
  const relax_alltoall_args_t& args = r.args.alltoall;
  Descriptor& d = local.desc;
  const int size = ctx.set_size();
  if (args.nsplits == 0) {
    if (d.dim0() % size != 0) {
      return kinds::fail(local, "without splits the first dimension (" + std::to_string(d.dim0()) +
                            ") must be divisible by the number of ranks (" + std::to_string(size) + ")");
    }
    return Status::ok();
  }
  if (args.nsplits != size || !args.splits) {
    return kinds::fail(local, "splits must have one entry per rank (" + std::to_string(size) + "), got " +
                          std::to_string(args.nsplits));
  }
  d.splits.assign(args.splits, args.splits + args.nsplits);
  int64_t sum = 0;
  for (int64_t split : d.splits) {
    if (split < 0) return kinds::fail(local, "negative entry in splits " + shape_string(d.splits));
    if (!checked_add(sum, split, sum)) {  // entries near INT64_MAX would wrap the sum to the right total
      return kinds::fail(local, "splits " + shape_string(d.splits) + " overflow int64 when summed");
    }
  }
  if (sum != d.dim0()) {
    return kinds::fail(local, "splits " + shape_string(d.splits) + " sum to " + std::to_string(sum) +
                          " but the first dimension is " + std::to_string(d.dim0()));
  }
  return Status::ok();
}

Status run(RunContext& ctx, ExecItem& item, std::vector<int64_t>& received_splits) {
  const Descriptor& d = item.tensor->first();
  const size_t esize = dtype_size(d.dtype);
  const int size = ctx.collectives.size();
  const size_t me = static_cast<size_t>(ctx.collectives.rank());
  const int64_t row = d.row_elements();
  auto splits_of = [&](const Descriptor& desc) {
    return desc.splits.empty() ? even_counts(desc.dim0(), size) : desc.splits;
  };
  // Whatever one rank receives is at most all the rows every rank sends: when those fit in int64
  // bytes, so does each output. Checked on the peers' dims every rank holds alike, so all of them
  // fail this request before any allocation callback sees an overflowed shape.
  int64_t all_rows = 0;
  for (const auto& peer : item.tensor->per_rank) {
    if (all_rows >= 0 && peer && !checked_add(all_rows, peer->dim0(), all_rows)) all_rows = -1;
  }
  int64_t all_elements = 0, all_bytes = 0;
  if (all_rows < 0 || !checked_mul(all_rows, row, all_elements) ||
      !checked_mul(all_elements, static_cast<int64_t>(esize), all_bytes)) {
    return Status::error(RELAX_ERR_INVALID_ARGUMENT, "alltoall '" + d.name +
                                                         "': the ranks' rows together are more than fit in int64 "
                                                         "bytes (rows of shape " +
                                                         kinds::row_shape_of(d) + ")");
  }
  const std::vector<int64_t> my_splits = splits_of(item.local->desc);
  std::vector<int64_t> send_counts, recv_counts;
  received_splits.clear();
  int64_t rows = 0;
  for (int r = 0; r < size; ++r) {
    send_counts.push_back(my_splits[static_cast<size_t>(r)] * row);
    const auto& peer = item.tensor->per_rank[static_cast<size_t>(r)];
    const int64_t from_peer = peer ? splits_of(*peer)[me] : 0;
    received_splits.push_back(from_peer);
    recv_counts.push_back(from_peer * row);
    rows += from_peer;
  }
  const int64_t bytes = rows * row * static_cast<int64_t>(esize);
  std::vector<uint8_t> fallback;
  Status refused;
  void* out = kinds::output_within_capacity(ctx, item, kinds::with_dim0(d.shape, rows), fallback, bytes, refused);
  if (!out && bytes > 0) {
    return Status::error(RELAX_ERR_INTERNAL, "could not allocate the alltoall output for '" + d.name + "'");
  }
  Status s = ctx.collectives.alltoallv(item.local->input, send_counts, out, recv_counts, esize);
  return s.is_ok() ? refused : s;
}

const RequestKindRegistration kAlltoall({
    RELAX_REQ_ALLTOALL, "alltoall", Lane::kNegotiated, /*takes_tensor=*/true, /*global=*/false, /*fuses=*/false,
    parse,
    {{"tensor ranks (number of dimensions)", kinds::ndim_of}, {"shapes beyond the first dimension", kinds::row_shape_of}},
    kinds::refuse_when_joined, run});

}  // namespace
}  // namespace relax
