// Small helpers shared by the collectives' MPI point-to-point code.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <string>

#include "transport/mpi_context.h"
#include "util/types.h"

namespace relax {

constexpr int64_t kMaxMessageBytes = 1ll << 30;  // MPI counts are int: chunk larger transfers

inline int mod(int a, int n) { return ((a % n) + n) % n; }

// OK, or RELAX_ERR_MPI naming the call `what` and MPI's error.
inline Status mpi_status(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return Status::ok();
  return mpi_call_failed(rc, what);
}

}  // namespace relax
