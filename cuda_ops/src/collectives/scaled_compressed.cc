#include "collectives/scaled_compressed.h"

#include <algorithm>

namespace relax {

Status scaled_compressed_allreduce(Collectives& collectives, const Codec& codec, const CompressedAllreduce& op,
                                   const StepScale& scale, const std::vector<int>& world_ranks,
                                   std::vector<uint8_t>& scratch) {
  const int32_t parameters = static_cast<int32_t>(scale.factors.size());
  std::vector<float> statistics(static_cast<size_t>(scale_statistics_count(scale.factors)));
  if (scale.statistics) {
    std::copy(scale.statistics, scale.statistics + statistics.size(), statistics.begin());
  } else {
    scale_statistics(op.input, scale.factors.data(), parameters, statistics.data());
  }
  // the average a lone all-reduce request of these statistics would give, bit for bit
  Status status = collectives.allreduce(statistics.data(), statistics.data(), static_cast<int64_t>(statistics.size()),
                                        RELAX_FLOAT32, RELAX_OP_SUM, 1.0 / static_cast<double>(collectives.size()));
  if (!status.is_ok()) return status;
  const std::vector<float> previous(scale.smoothed, scale.smoothed + statistics.size());  // the old scale's
  smooth_statistics(scale.smoothed, statistics.data(), static_cast<int64_t>(statistics.size()), scale.decay);

  ScaleResiduals residuals;
  if (op.worker_error) {
    const std::vector<int64_t> counts = even_counts(op.count, collectives.size());
    residuals = ScaleResiduals{op.worker_error, op.owner_error, block_offsets(counts)[static_cast<size_t>(collectives.rank())],
                               op.owner_error ? counts[static_cast<size_t>(collectives.rank())] : 0};
  }
  scale_apply(previous.data(), scale.smoothed, scale.factors.data(), parameters, scale.floor, op.input, op.output,
              residuals);

  CompressedAllreduce scaled = op;
  scaled.input = op.output;
  status = compressed_allreduce(collectives, codec, scaled, world_ranks, scratch);
  if (!status.is_ok()) return status;
  scale_multiply(scale.smoothed, scale.factors.data(), parameters, scale.floor, op.output);
  return Status::ok();
}

}  // namespace relax
