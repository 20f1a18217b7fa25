// Helpers the direct lane's two files share: names hashed into MPI tags and headers, MPI failures
// as a Status.
#pragma once

#include <cstdint>
#include <string>

#include "transport/mpi_context.h"
#include "util/types.h"

namespace relax {

// FNV-1a of `s`: the same on every rank, for tags and header fields derived from names.
inline uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// An MPI call's failure, naming the call.
inline Status mpi_failure(int rc, const char* what) {
  return mpi_call_failed(rc, what);
}

}  // namespace relax
