// Engine settings, read from RELAX_* environment variables (HOROVOD_* names accepted as a
// fallback so existing launch scripts keep working).
#pragma once

#include <cstdint>
#include <string>

namespace relax {

constexpr int64_t kMaxShmSlotBytes = 1ll << 30;
// Also the bounds of relax_set_fusion_threshold / relax_set_cycle_time_ms at run time.
constexpr int64_t kMaxFusionThresholdBytes = 64ll << 30;
constexpr double kMaxCycleTimeMs = 1000;

// The one rule every numeric setting follows (RELAX_* and its HOROVOD_* fallback): a whole
// number (integer settings, decimal digits with an optional sign) or a finite number (real
// settings) within [minimum, maximum]. nan, inf, 1e30 or a count that does not fit are rejected
// before any conversion, so no setting can reach the engine as a value it would cast with
// undefined behaviour or wait on forever. On failure `error` gets "NAME=text is not ... in
// [minimum, maximum] (unit)" and `value` is left unchanged.
bool parse_integer_setting(const char* name, const char* text, int64_t minimum, int64_t maximum, const char* unit,
                           int64_t& value, std::string& error);
bool parse_real_setting(const char* name, const char* text, double minimum, double maximum, const char* unit,
                        double& value, std::string& error);

struct EngineConfig {
  int64_t fusion_threshold_bytes = 64ll << 20;  // RELAX_FUSION_THRESHOLD
  double cycle_time_ms = 1.0;                   // RELAX_CYCLE_TIME: an idle engine's first wait between rounds
  double idle_tick_max_ms = 5.0;                // RELAX_IDLE_TICK_MAX: that wait's limit as it doubles while rounds change nothing
  int64_t cache_capacity = 1024;                // RELAX_CACHE_CAPACITY
  double stall_check_seconds = 60.0;            // RELAX_STALL_CHECK_TIME (0 disables)
  double stall_shutdown_seconds = 0.0;          // RELAX_STALL_SHUTDOWN_TIME (0 = never)
  double deadlock_seconds = 5.0;                // RELAX_DEADLOCK_TIME (0 disables; see coordinator.h)
  bool joined_ranks_gather_nothing = false;     // RELAX_JOINED_RANKS=contribute-nothing (else Horovod's error)
  // Transport-dependent knobs: -1 = choose by topology (apply_topology_defaults).
  int64_t ring_segment_bytes = -1;              // RELAX_RING_SEGMENT_BYTES
  int64_t ring_receive_window = 2;              // RELAX_RING_WINDOW
  int64_t group_cache_capacity = 64;            // RELAX_GROUP_CACHE_SIZE: cached group communicators
  int64_t mpi_allreduce_max_bytes = -1;         // RELAX_MPI_ALLREDUCE_MAX_BYTES
  int64_t mpi_allgather_max_bytes = -1;         // RELAX_MPI_ALLGATHER_MAX_BYTES
  double idle_spin_us = -1;                     // RELAX_IDLE_SPIN_US
  std::string wait_yield = "auto";              // RELAX_WAIT_YIELD: auto | on | off
  bool yield_while_waiting = false;             // from wait_yield (apply_topology_defaults)
  std::string shm_single_copy = "auto";         // RELAX_SHM_SINGLE_COPY: auto | on | off (shm_transport.h)
  std::string tcp_ring = "auto";                // RELAX_TCP_RING: auto | on | off (transport/tcp_ring.h)
  bool use_tcp_ring = false;                    // from tcp_ring (apply_topology_defaults): auto = across nodes
  std::string tcp_eager_limit = "auto";         // RELAX_TCP_EAGER_LIMIT: auto | off | bytes (tcp_transport.h)
  bool shm_collectives = true;                  // RELAX_SHM_COLLECTIVES: auto | off (shm_collectives.h)
  int64_t shm_min_bytes = 0;                    // RELAX_SHM_MIN_BYTES: smaller operations use MPI
  int64_t shm_slot_bytes = 1 << 20;             // RELAX_SHM_SLOT_BYTES: per rank and round (<= 1 GiB)
  std::string fast_path = "auto";               // RELAX_FAST_PATH: auto (on off shared memory) | on | off: steady steps skip negotiation
  int64_t fast_path_bucket_bytes = 0;           // RELAX_FAST_PATH_BUCKET_BYTES: 0 = a 16th of the cycle, >= 1 MiB
  double heap_keep_mb = 64;                     // RELAX_HEAP_KEEP_MB: freed memory kept (util/heap.h; 0 = glibc's way)

  // Reads the environment; invalid values produce a message in `error` (each naming its variable
  // and the allowed range, see config.cc's table) and keep the default. init fails on a
  // non-empty error before MPI opens, so every rank started with the setting fails alike.
  static EngineConfig from_environment(std::string& error);

  // Fills the knobs left at -1, and keeps shared-memory collectives to single-node jobs. Measured on this project's machines: within one node (shared
  // memory) Open MPI's allreduce/allgather match our ring up to 16 MiB and 1 MiB ring segments
  // are fastest; across nodes our ring over its own TCP connections beats Open MPI's algorithms
  // at every size when ranks share cores on some host, above 4 KiB otherwise (config.cc); over MPI point-to-point
  // (RELAX_TCP_RING=off) from 1 MiB, with 16 MiB segments each sent as one eager message
  // (tcp_transport.h).
  // An idle engine polls for new submissions for idle_spin_us before it sleeps: waking a sleeping
  // thread costs 10-40 us on a virtual machine, more than a small collective. Polling only pays
  // when every rank on this machine has a core of its own, so it is off when ranks outnumber cores.
  // For the same reason the collectives' point-to-point waits then yield the core between polls
  // (RELAX_WAIT_YIELD=auto): MPI's busy wait starved the rank sharing the core, and a 1 MiB
  // gradient all-reduce per layer over 10 Gbit/s on 4 ranks with 2 cores took a 162-167 ms step
  // instead of 127 ms.
  void apply_topology_defaults(bool single_node, int host_ranks, int cores, bool cores_shared_somewhere);
};

}  // namespace relax
