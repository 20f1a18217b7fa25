#include "transport/tcp_transport.h"

#include <mpi.h>

#include <stdexcept>
#include <string>
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

// decide_tcp_eager_limit throws for a bad setting: init reports it, the load-time call ignores it.
std::string apply(const std::string& setting, int64_t segment, EnvironmentChoice& choice) {
  const int64_t limit = decide_tcp_eager_limit(setting, segment);
#ifdef OPEN_MPI
  if (limit == 0) return "TCP: Open MPI's default eager limit (RELAX_TCP_EAGER_LIMIT=off)";
  if (user_chose_parameter(kParameters)) return "TCP: the eager limit and send size the user set for Open MPI";
  const std::string value = std::to_string(limit);
  for (const std::string& name : kParameters) choice.set("OMPI_MCA_" + name, value);
  return "TCP: ring segments sent eagerly (OMPI_MCA_btl_tcp_eager_limit=" + value + ")";
#else
  (void)limit;
  (void)choice;
  return "TCP: MPI's defaults (not Open MPI)";
#endif
}

}  // namespace

std::string prepare_tcp_transport(const std::string& setting, int64_t ring_segment_bytes) {
  static EnvironmentChoice choice("TCP: as configured by whoever initialized MPI");
  return choice.prepare(setting + " " + std::to_string(ring_segment_bytes),
                        [&](EnvironmentChoice& c) { return apply(setting, ring_segment_bytes, c); });
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
