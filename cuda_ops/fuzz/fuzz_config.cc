// Fuzz target: EngineConfig::from_environment (engine/config.cc) with arbitrary values of every
// variable it reads, then apply_topology_defaults with arbitrary topology. The input is split at
// NUL bytes into values for the variables in order (a missing value unsets the variable).
// Properties: no crash or UB; an accepted configuration has sane numbers (no negative sizes,
// NaN or infinite times), else an error message says what is wrong.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "engine/config.h"

namespace {

const char* const kNames[] = {
    "RELAX_FUSION_THRESHOLD", "RELAX_CYCLE_TIME", "RELAX_CACHE_CAPACITY", "RELAX_STALL_CHECK_TIME",
    "RELAX_STALL_SHUTDOWN_TIME", "RELAX_OP_TIMEOUT", "RELAX_DEADLOCK_TIME", "RELAX_RING_WINDOW",
    "RELAX_GROUP_CACHE_SIZE", "RELAX_MPI_ALLREDUCE_MAX_BYTES", "RELAX_MPI_ALLGATHER_MAX_BYTES",
    "RELAX_IDLE_SPIN_US", "RELAX_RING_SEGMENT_BYTES", "RELAX_SHM_SINGLE_COPY", "RELAX_WAIT_YIELD",
    "RELAX_TCP_RING", "RELAX_TCP_EAGER_LIMIT", "RELAX_SHM_COLLECTIVES", "RELAX_SHM_MIN_BYTES",
    "RELAX_SHM_SLOT_BYTES", "RELAX_HEAP_KEEP_MB", "RELAX_JOINED_RANKS", "HOROVOD_STALL_CHECK_DISABLE",
    "HOROVOD_FUSION_THRESHOLD", "HOROVOD_CYCLE_TIME", "HOROVOD_CACHE_CAPACITY",
    "HOROVOD_STALL_CHECK_TIME_SECONDS", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS",
};

bool sane(double x) { return std::isfinite(x) && x >= 0; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int host_ranks = data[0] % 9, cores = data[1] % 9;
  const std::string input(reinterpret_cast<const char*>(data) + 2, size - 2);
  size_t pos = 0;
  for (const char* name : kNames) {
    if (pos > input.size()) {
      unsetenv(name);
      continue;
    }
    const size_t end = std::min(input.find('\0', pos), input.size());
    setenv(name, input.substr(pos, end - pos).c_str(), 1);
    pos = end + 1;
  }
  std::string error;
  relax::EngineConfig c = relax::EngineConfig::from_environment(error);
  if (error.empty()) {
    // Every number the engine later sizes buffers or sleeps with must be finite and not negative.
    if (!sane(c.cycle_time_ms) || !sane(c.stall_check_seconds) || !sane(c.stall_shutdown_seconds) ||
        !sane(c.deadlock_seconds) || !sane(c.heap_keep_mb) || c.fusion_threshold_bytes < 0 ||
        c.cache_capacity < 0 || c.shm_slot_bytes < 4096 || c.shm_slot_bytes > relax::kMaxShmSlotBytes ||
        c.ring_receive_window < 2) {
      std::abort();
    }
    if (!(c.idle_spin_us == -1 || sane(c.idle_spin_us))) std::abort();
  }
  c.apply_topology_defaults(data[0] & 0x80, host_ranks, cores, data[1] & 0x80);
  if (c.ring_segment_bytes <= 0 || c.mpi_allreduce_max_bytes < 0 || !sane(c.idle_spin_us)) std::abort();
  return 0;
}
