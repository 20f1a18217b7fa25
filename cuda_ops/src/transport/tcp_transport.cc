#include "transport/tcp_transport.h"

#include <mpi.h>

#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "transport/open_mpi_params.h"

namespace relax {
namespace {

constexpr int64_t kHeaderRoom = 64 << 10;  // Open MPI's fragment header counts against the limit

bool parse_bytes(const std::string& text, int64_t& value) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 15) return false;
  value = std::stoll(text);
  return true;
}

}  // namespace

int64_t decide_tcp_eager_limit(const std::string& setting, int64_t ring_segment_bytes) {
  if (setting == "off") return 0;
  if (setting == "auto") {
    return (ring_segment_bytes > 0 ? ring_segment_bytes : kCrossNodeRingSegmentBytes) + kHeaderRoom;
  }
  int64_t bytes = 0;
  if (parse_bytes(setting, bytes) && bytes >= 4096) return bytes;
  throw std::invalid_argument("RELAX_TCP_EAGER_LIMIT=" + setting + " is not auto, off or a byte count >= 4096");
}

namespace {

#ifdef OPEN_MPI
const std::vector<std::string> kParameters = {"btl_tcp_eager_limit", "btl_tcp_max_send_size"};
#endif

// What this process set, so that a later call with another setting can decide again.
struct Prepared {
  std::mutex mutex;
  bool done = false;
  std::string setting;
  int64_t segment = 0;
  std::string description = "TCP: as configured by whoever initialized MPI";
  bool set_variables = false;
};

Prepared& prepared() {
  static Prepared p;
  return p;
}

// setenv runs before MPI_Init, on the thread initializing relaxlib (see shm_transport.cc).
std::string apply(const std::string& setting, int64_t segment, bool& set_variables) {
  set_variables = false;
  const int64_t limit = decide_tcp_eager_limit(setting, segment);
#ifdef OPEN_MPI
  if (limit == 0) return "TCP: Open MPI's default eager limit (RELAX_TCP_EAGER_LIMIT=off)";
  if (user_chose_parameter(kParameters)) return "TCP: the eager limit and send size the user set for Open MPI";
  const std::string value = std::to_string(limit);
  for (const std::string& name : kParameters) setenv(("OMPI_MCA_" + name).c_str(), value.c_str(), 1);
  set_variables = true;
  return "TCP: ring segments sent eagerly (OMPI_MCA_btl_tcp_eager_limit=" + value + ")";
#else
  (void)limit;
  return "TCP: MPI's defaults (not Open MPI)";
#endif
}

}  // namespace

std::string prepare_tcp_transport(const std::string& setting, int64_t ring_segment_bytes) {
  Prepared& p = prepared();
  std::lock_guard<std::mutex> lock(p.mutex);
  int mpi_ready = 0;
  MPI_Initialized(&mpi_ready);
  if (mpi_ready || (p.done && p.setting == setting && p.segment == ring_segment_bytes)) return p.description;
#ifdef OPEN_MPI
  if (p.set_variables) {  // the setting changed since the load: decide again
    for (const std::string& name : kParameters) unsetenv(("OMPI_MCA_" + name).c_str());
  }
#endif
  p.description = apply(setting, ring_segment_bytes, p.set_variables);
  p.setting = setting;
  p.segment = ring_segment_bytes;
  p.done = true;
  return p.description;
}

namespace {

// At library load; a bad setting is left for init to report.
const bool g_prepared_at_load = [] {
  const std::string setting = env_or("RELAX_TCP_EAGER_LIMIT", "auto");
  int64_t segment = -1;
  if (!parse_bytes(env_or("RELAX_RING_SEGMENT_BYTES", ""), segment)) segment = -1;
  try {
    prepare_tcp_transport(setting, segment);
  } catch (const std::exception&) {
    return false;
  }
  return true;
}();

}  // namespace

}  // namespace relax
