// A compressed all-reduce whose input is divided by the factored per-element step scale first
// (codecs/step_scale.h, relax_step_scale_args_t): statistics, their average over the ranks,
// smoothing, scaling, the compressed all-reduce, and the result multiplied back, all in one
// operation. The statistics' average then needs no negotiation round and no trip back to the
// framework's thread before the bucket can leave.
#pragma once

#include <cstdint>
#include <vector>

#include "codecs/codec.h"
#include "codecs/step_scale.h"
#include "collectives/collectives.h"
#include "collectives/compressed.h"

namespace relax {

struct StepScale {
  std::vector<ScaleFactor> factors;  // the parameters of the tensor, one after another
  float floor = 0.1f;
  double decay = 0.5;
  const float* statistics = nullptr;  // this rank's, computed by the caller; null: computed here
  float* smoothed = nullptr;  // state: scale_statistics_count(factors) floats
};

// Runs `op` with its input divided by the scale; op.output receives the average (or sum) in the
// input's units. op.input is only read. The residuals of op's error feedback are kept in scaled
// units (rescaled when the scale changes). A non-finite input on any rank fails the operation on
// every rank, the smoothed statistics of its parameters unchanged.
Status scaled_compressed_allreduce(Collectives& collectives, const Codec& codec, const CompressedAllreduce& op,
                                   const StepScale& scale, const std::vector<int>& world_ranks,
                                   std::vector<uint8_t>& scratch);

}  // namespace relax
