#include "engine/config.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

#include "collectives/transport_table.h"
#include "transport/tcp_transport.h"
#include "util/text.h"

namespace relax {
namespace {

// The variable that is set (`name`, else `fallback`), so messages name the one the user wrote.
const char* lookup(const char* name, const char* fallback, const char** used = nullptr) {
  const char* v = std::getenv(name);
  const char* which = name;
  if ((!v || !*v) && fallback) {
    v = std::getenv(fallback);
    which = fallback;
  }
  if (used) *used = which;
  return (v && *v) ? v : nullptr;
}

void add_error(std::string& error, const std::string& text) { error += (error.empty() ? "" : "; ") + text; }

// Bounds as users read them: 1000, 0.5, 86400 (never 1.000000e+03).
std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.15g", v);
  return buf;
}

std::string range_text(const std::string& minimum, const std::string& maximum, const char* unit) {
  return "in [" + minimum + ", " + maximum + "]" + (unit && *unit ? std::string(" (") + unit + ")" : "");
}

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

// Every numeric setting the core reads, through parse_*_setting; the bounds are the documented
// ranges (docs/architecture.md points here). Maxima keep each value far from where arithmetic on
// it could overflow: sizes up to 1 GiB (per segment or slot) or 1 TiB (thresholds), times up to a
// day, the cycle time up to a second.
void read_integer(const char* name, const char* fallback, int64_t& value, int64_t minimum, int64_t maximum,
                  const char* unit, std::string& error) {
  const char* used = name;
  if (const char* text = lookup(name, fallback, &used)) parse_integer_setting(used, text, minimum, maximum, unit, value, error);
}

void read_real(const char* name, const char* fallback, double& value, double minimum, double maximum, const char* unit,
               std::string& error) {
  const char* used = name;
  if (const char* text = lookup(name, fallback, &used)) parse_real_setting(used, text, minimum, maximum, unit, value, error);
}

constexpr int64_t kGiB = 1ll << 30;
constexpr int64_t kTiB = 1ll << 40;
constexpr double kDaySeconds = 86400;
constexpr int64_t kMaxTcpEagerLimit = kGiB;
constexpr int64_t kMaxLocalSize = 1 << 20;

}  // namespace

bool parse_integer_setting(const char* name, const char* text, int64_t minimum, int64_t maximum, const char* unit,
                           int64_t& value, std::string& error) {
  // Digits with an optional sign, parsed as an integer: strtoll reports what does not fit
  // (ERANGE) instead of a double's silent rounding and undefined cast.
  const char* digits = (*text == '+' || *text == '-') ? text + 1 : text;
  bool ok = *digits >= '0' && *digits <= '9';
  long long parsed = 0;
  if (ok) {
    char* end = nullptr;
    errno = 0;
    parsed = std::strtoll(text, &end, 10);
    ok = errno == 0 && *end == '\0' && parsed >= minimum && parsed <= maximum;
  }
  if (!ok) {
    add_error(error, std::string(name) + "=" + text + " is not a whole number " +
                         range_text(std::to_string(minimum), std::to_string(maximum), unit));
    return false;
  }
  value = parsed;
  return true;
}

bool parse_real_setting(const char* name, const char* text, double minimum, double maximum, const char* unit,
                        double& value, std::string& error) {
  char* end = nullptr;
  const double parsed = std::strtod(text, &end);
  // isfinite first: nan compares false with everything and would pass a negated range check.
  if (end == text || *end != '\0' || !std::isfinite(parsed) || parsed < minimum || parsed > maximum) {
    add_error(error, std::string(name) + "=" + text + " is not a finite number " +
                         range_text(number_text(minimum), number_text(maximum), unit));
    return false;
  }
  value = parsed;
  return true;
}

EngineConfig EngineConfig::from_environment(std::string& error) {
  EngineConfig c;
  read_integer("RELAX_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD", c.fusion_threshold_bytes, 0,
               kMaxFusionThresholdBytes, "bytes", error);
  read_real("RELAX_CYCLE_TIME", "HOROVOD_CYCLE_TIME", c.cycle_time_ms, 0, kMaxCycleTimeMs, "milliseconds", error);
  read_real("RELAX_IDLE_TICK_MAX", nullptr, c.idle_tick_max_ms, 0, kMaxCycleTimeMs, "milliseconds", error);
  read_integer("RELAX_CACHE_CAPACITY", "HOROVOD_CACHE_CAPACITY", c.cache_capacity, 0, 1 << 20, "entries", error);
  read_real("RELAX_STALL_CHECK_TIME", "HOROVOD_STALL_CHECK_TIME_SECONDS", c.stall_check_seconds, 0, kDaySeconds,
            "seconds", error);
  read_real("RELAX_STALL_SHUTDOWN_TIME", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", c.stall_shutdown_seconds, 0,
            kDaySeconds, "seconds", error);
  // RELAX_OP_TIMEOUT (like torch.distributed's timeout=): a collective some ranks have not
  // submitted after this many seconds fails on every rank; the stricter of it and the above wins.
  double op_timeout = 0.0;
  read_real("RELAX_OP_TIMEOUT", nullptr, op_timeout, 0, kDaySeconds, "seconds", error);
  if (op_timeout > 0 && (c.stall_shutdown_seconds <= 0 || op_timeout < c.stall_shutdown_seconds)) {
    c.stall_shutdown_seconds = op_timeout;
  }
  read_real("RELAX_DEADLOCK_TIME", nullptr, c.deadlock_seconds, 0, kDaySeconds, "seconds", error);
  read_integer("RELAX_RING_WINDOW", nullptr, c.ring_receive_window, 2, 1024, "segments", error);
  read_integer("RELAX_GROUP_CACHE_SIZE", nullptr, c.group_cache_capacity, 0, 1 << 16, "groups", error);
  read_integer("RELAX_MPI_ALLREDUCE_MAX_BYTES", nullptr, c.mpi_allreduce_max_bytes, 0, kTiB, "bytes", error);
  read_integer("RELAX_MPI_ALLGATHER_MAX_BYTES", nullptr, c.mpi_allgather_max_bytes, 0, kTiB, "bytes", error);
  read_real("RELAX_IDLE_SPIN_US", nullptr, c.idle_spin_us, 0, 1e6, "microseconds", error);
  read_integer("RELAX_RING_SEGMENT_BYTES", nullptr, c.ring_segment_bytes, 4096, kGiB, "bytes", error);
  read_auto_on_off("RELAX_SHM_SINGLE_COPY", c.shm_single_copy, error);
  read_auto_on_off("RELAX_WAIT_YIELD", c.wait_yield, error);
  read_auto_on_off("RELAX_TCP_RING", c.tcp_ring, error);
  if (const char* eager = lookup("RELAX_TCP_EAGER_LIMIT", nullptr)) {
    // auto, off, or a byte count by the same rule as every numeric setting.
    const std::string text = eager;
    int64_t bytes = 0;
    if (text == "auto" || text == "off" ||
        parse_integer_setting("RELAX_TCP_EAGER_LIMIT", eager, 4096, kMaxTcpEagerLimit, "bytes, or auto or off", bytes,
                              error)) {
      try {
        decide_tcp_eager_limit(eager, c.ring_segment_bytes);
        c.tcp_eager_limit = eager;
      } catch (const std::invalid_argument& e) {
        add_error(error, e.what());
      }
    }
  }
  std::string shm_collectives = c.shm_collectives ? "auto" : "off";
  read_auto_on_off("RELAX_SHM_COLLECTIVES", shm_collectives, error);
  c.shm_collectives = shm_collectives != "off";
  read_integer("RELAX_SHM_MIN_BYTES", nullptr, c.shm_min_bytes, 0, kTiB, "bytes", error);
  read_integer("RELAX_SHM_SLOT_BYTES", nullptr, c.shm_slot_bytes, 4096, kMaxShmSlotBytes, "bytes", error);
  read_auto_on_off("RELAX_FAST_PATH", c.fast_path, error);
  read_integer("RELAX_FAST_PATH_BUCKET_BYTES", nullptr, c.fast_path_bucket_bytes, 0, kMaxFusionThresholdBytes, "bytes",
               error);
  read_real("RELAX_HEAP_KEEP_MB", nullptr, c.heap_keep_mb, 0, 1 << 20, "MiB", error);
  // Read again by MpiContext::derive_topology (which checks it divides the world size); checked
  // here so that it follows the same rule and a bad value fails init before MPI opens.
  int64_t local_size = 1;
  read_integer("RELAX_LOCAL_SIZE", nullptr, local_size, 1, kMaxLocalSize, "ranks per node", error);
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
  if (ring_segment_bytes < 0) ring_segment_bytes = single_node ? kRingSegmentBytes : kCrossNodeRingSegmentBytes;
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
  if (mpi_allreduce_max_bytes < 0) mpi_allreduce_max_bytes = single_node ? kMpiCollectiveMaxBytes : cross_node_mpi_max;
  if (mpi_allgather_max_bytes < 0) mpi_allgather_max_bytes = single_node ? kMpiCollectiveMaxBytes : cross_node_mpi_max;
  if (!single_node) shm_collectives = false;  // (also when RELAX_LOCAL_SIZE pretends several nodes)
}

}  // namespace relax
