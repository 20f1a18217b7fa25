#include "engine/config.h"

#include <cstdlib>
#include <stdexcept>

#include "transport/tcp_transport.h"
#include "util/text.h"

namespace relax {
namespace {

const char* lookup(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  if ((!v || !*v) && fallback) v = std::getenv(fallback);
  return (v && *v) ? v : nullptr;
}

void add_error(std::string& error, const std::string& text) { error += (error.empty() ? "" : "; ") + text; }

// Settings that take auto, on or off (is_auto_on_off).
void read_auto_on_off(const char* name, std::string& value, std::string& error) {
  const char* text = lookup(name, nullptr);
  if (!text) return;
  if (is_auto_on_off(text)) {
    value = text;
  } else {
    add_error(error, std::string(name) + "=" + text + " is not one of auto, on, off");
  }
}

template <typename T>
void read(const char* name, const char* fallback, T& value, T minimum, std::string& error) {
  const char* text = lookup(name, fallback);
  if (!text) return;
  char* end = nullptr;
  const double parsed = std::strtod(text, &end);
  if (end == text || *end != '\0' || parsed < static_cast<double>(minimum)) {
    add_error(error, std::string(name) + "=" + text + " is not a number >= " + std::to_string(minimum));
    return;
  }
  value = static_cast<T>(parsed);
}

}  // namespace

EngineConfig EngineConfig::from_environment(std::string& error) {
  EngineConfig c;
  read("RELAX_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD", c.fusion_threshold_bytes, int64_t{0}, error);
  read("RELAX_CYCLE_TIME", "HOROVOD_CYCLE_TIME", c.cycle_time_ms, 0.0, error);
  read("RELAX_CACHE_CAPACITY", "HOROVOD_CACHE_CAPACITY", c.cache_capacity, int64_t{0}, error);
  read("RELAX_STALL_CHECK_TIME", "HOROVOD_STALL_CHECK_TIME_SECONDS", c.stall_check_seconds, 0.0, error);
  read("RELAX_STALL_SHUTDOWN_TIME", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", c.stall_shutdown_seconds, 0.0, error);
  // RELAX_OP_TIMEOUT (like torch.distributed's timeout=): a collective some ranks have not
  // submitted after this many seconds fails on every rank; the stricter of it and the above wins.
  double op_timeout = 0.0;
  read("RELAX_OP_TIMEOUT", nullptr, op_timeout, 0.0, error);
  if (op_timeout > 0 && (c.stall_shutdown_seconds <= 0 || op_timeout < c.stall_shutdown_seconds)) {
    c.stall_shutdown_seconds = op_timeout;
  }
  read("RELAX_DEADLOCK_TIME", nullptr, c.deadlock_seconds, 0.0, error);
  read("RELAX_RING_WINDOW", nullptr, c.ring_receive_window, int64_t{2}, error);
  read("RELAX_GROUP_CACHE_SIZE", nullptr, c.group_cache_capacity, int64_t{0}, error);
  read("RELAX_MPI_ALLREDUCE_MAX_BYTES", nullptr, c.mpi_allreduce_max_bytes, int64_t{0}, error);
  read("RELAX_MPI_ALLGATHER_MAX_BYTES", nullptr, c.mpi_allgather_max_bytes, int64_t{0}, error);
  read("RELAX_IDLE_SPIN_US", nullptr, c.idle_spin_us, 0.0, error);
  read("RELAX_RING_SEGMENT_BYTES", nullptr, c.ring_segment_bytes, int64_t{4096}, error);
  read_auto_on_off("RELAX_SHM_SINGLE_COPY", c.shm_single_copy, error);
  read_auto_on_off("RELAX_WAIT_YIELD", c.wait_yield, error);
  read_auto_on_off("RELAX_TCP_RING", c.tcp_ring, error);
  if (const char* eager = lookup("RELAX_TCP_EAGER_LIMIT", nullptr)) {
    try {
      decide_tcp_eager_limit(eager, c.ring_segment_bytes);
      c.tcp_eager_limit = eager;
    } catch (const std::invalid_argument& e) {
      add_error(error, e.what());
    }
  }
  std::string shm_collectives = c.shm_collectives ? "auto" : "off";
  read_auto_on_off("RELAX_SHM_COLLECTIVES", shm_collectives, error);
  c.shm_collectives = shm_collectives != "off";
  read("RELAX_SHM_MIN_BYTES", nullptr, c.shm_min_bytes, int64_t{0}, error);
  read("RELAX_SHM_SLOT_BYTES", nullptr, c.shm_slot_bytes, int64_t{4096}, error);
  if (c.shm_slot_bytes > kMaxShmSlotBytes) {
    add_error(error, "RELAX_SHM_SLOT_BYTES=" + std::to_string(c.shm_slot_bytes) + " is above the limit of 1 GiB");
    c.shm_slot_bytes = EngineConfig().shm_slot_bytes;
  }
  read("RELAX_HEAP_KEEP_MB", nullptr, c.heap_keep_mb, 0.0, error);
  if (const char* joined = lookup("RELAX_JOINED_RANKS", nullptr)) {
    const std::string value = joined;
    if (value == "contribute-nothing" || value == "error") {
      c.joined_ranks_gather_nothing = value == "contribute-nothing";
    } else {
      add_error(error, "RELAX_JOINED_RANKS=" + value + " is not one of error, contribute-nothing");
    }
  }
  const char* disable = lookup("HOROVOD_STALL_CHECK_DISABLE", nullptr);
  if (disable && std::string(disable) == "1") c.stall_check_seconds = 0;
  return c;
}

void EngineConfig::apply_topology_defaults(bool single_node, int host_ranks, int cores, bool cores_shared_somewhere) {
  const bool own_cores = cores > 0 && host_ranks <= cores;
  if (idle_spin_us < 0) idle_spin_us = own_cores ? 100.0 : 0.0;
  yield_while_waiting = wait_yield == "on" || (wait_yield == "auto" && !own_cores);
  use_tcp_ring = tcp_ring == "on" || (tcp_ring == "auto" && !single_node);
  if (ring_segment_bytes < 0) ring_segment_bytes = single_node ? (1ll << 20) : kCrossNodeRingSegmentBytes;
  // Across nodes with the TCP ring MPI's own all-reduce / all-gather serve tiny messages only,
  // and none where ranks share cores on some host: its blocking collectives spin there. 4 ranks
  // on 2 cores at 10 Gbit/s took 5.8-7.9 ms for a 16-256 KiB all-reduce against the TCP ring's
  // 0.6-1.1 (all-gather 2.0-6.0 against 0.56-0.68 ms), 0.66-0.77 against 0.55-0.64 ms up to
  // 4 KiB; in training, sign's 4-byte scale statistics per bucket through MPI cost the sleep
  // model 159-160 ms per step against 146 through the ring (4 ranks, 1 Gbit/s), and 31-35
  // against 26 ms of CPU per rank. With a core per rank MPI won below 16 KiB (28-44 us against
  // 58-75). Every rank must choose the same path, hence the agreed cores_shared_somewhere
  // rather than this host's cores.
  const int64_t cross_node_mpi_max = !use_tcp_ring ? (256ll << 10) : cores_shared_somewhere ? 0 : (4ll << 10);
  if (mpi_allreduce_max_bytes < 0) mpi_allreduce_max_bytes = single_node ? (16ll << 20) : cross_node_mpi_max;
  if (mpi_allgather_max_bytes < 0) mpi_allgather_max_bytes = single_node ? (16ll << 20) : cross_node_mpi_max;
  if (!single_node) shm_collectives = false;  // (also when RELAX_LOCAL_SIZE pretends several nodes)
}

}  // namespace relax
