// The bucket size chosen when the user gave none: one rule for the all-reduce's fast path (the
// engine) and DeAR's buckets (Python, through relax_auto_bucket_bytes).
#pragma once

#include <algorithm>
#include <cstdint>

namespace relax {

// The smallest automatic bucket: below 1 MiB a ring's per-operation latency starts to matter.
constexpr int64_t kMinAutoBucketBytes = int64_t{1} << 20;
// Buckets per step: enough that the first bucket's transfer starts early in the backward pass
// (docs/performance.md: on the transformer at 200 Mbit/s, 2 MiB buckets ran steps faster than
// quarters of the cycle).
constexpr int64_t kAutoBucketsPerStep = 16;

// A sixteenth of `step_bytes` (the bytes of one step's tensors), at least kMinAutoBucketBytes and
// at most `cap_bytes`, which wins where the two limits cross (a fusion threshold under 1 MiB).
inline int64_t auto_bucket_bytes(int64_t step_bytes, int64_t cap_bytes) {
  return std::min(cap_bytes, std::max(kMinAutoBucketBytes, step_bytes / kAutoBucketsPerStep));
}

}  // namespace relax
