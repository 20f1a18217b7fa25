#include "transport/shm_transport.h"

#include <mpi.h>

#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <vector>

#include "transport/open_mpi_params.h"
#include "util/text.h"

namespace relax {

ShmCopy decide_shm_copy(const std::string& setting, bool user_chose, bool virtual_machine) {
  if (setting == "on") return ShmCopy::kMpiDefault;
  if (setting == "off") return user_chose ? ShmCopy::kMpiDefault : ShmCopy::kCopyInOut;
  if (setting == "auto") return (!user_chose && virtual_machine) ? ShmCopy::kCopyInOut : ShmCopy::kMpiDefault;
  throw std::invalid_argument("RELAX_SHM_SINGLE_COPY=" + setting + " is not one of auto, on, off");
}

#ifdef OPEN_MPI
namespace {

// The vader BTL's parameter (Open MPI 1.8 to 4.1). Open MPI 5 renamed the BTL to sm and moved
// single copy into its own framework; we have not measured it there and leave it alone.
constexpr const char* kVariable = "OMPI_MCA_btl_vader_single_copy_mechanism";

const std::vector<std::string> kMechanismParameters = {"btl_sm_single_copy_mechanism",
                                                     "btl_vader_single_copy_mechanism"};

// x86 guests only: other architectures have no such flag, and `auto` keeps Open MPI's default.
bool running_under_hypervisor() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) == 0) return line.find(" hypervisor") != std::string::npos;
  }
  return false;
}

}  // namespace
#endif

namespace {

// Single-copy transfers (CMA, process_vm_readv) pin each 4 KiB page of the peer's buffer on every
// message. Inside this project's virtual machine that page walk cost more than a second memcpy:
// on 2 ranks MPI_Allreduce of 1 MiB took 125 us with CMA and 73 us copying through shared memory
// (more figures in docs/performance.md).
// `setting` has been validated by the caller.
std::string apply_shm_copy(const std::string& setting, EnvironmentChoice& choice) {
#ifdef OPEN_MPI
  if (open_mpi_major_version() >= 5) {
    return "shared memory: Open MPI 5's default (relaxlib's transport choice covers Open MPI 4 only)";
  }
  const std::string user = env_or(kVariable, "");
  const bool in_files = user.empty() && set_in_parameter_files(kMechanismParameters);
  const bool user_chose = !user.empty() || in_files;
  if (decide_shm_copy(setting, user_chose, running_under_hypervisor()) == ShmCopy::kCopyInOut) {
    choice.set(kVariable, "none");  // unset or empty: the user did not choose
    return std::string("shared memory: copy-in/copy-out (") + kVariable + "=none; " +
           (setting == "off" ? "RELAX_SHM_SINGLE_COPY=off" : "virtual machine") + ")";
  }
  if (in_files) return "shared memory: the single-copy mechanism set in an Open MPI parameter file";
  if (user_chose) return "shared memory: single-copy mechanism " + user + " (set by the user)";
  return "shared memory: Open MPI's default single-copy mechanism";
#else
  (void)setting;
  (void)choice;
  return "shared memory: MPI's default (not Open MPI)";
#endif
}

}  // namespace

std::string prepare_shm_transport(const std::string& setting) {
  static EnvironmentChoice choice("shared memory: as configured by whoever initialized MPI");
  return choice.prepare(setting, [&](EnvironmentChoice& c) { return apply_shm_copy(setting, c); });
}

namespace {

// At library load; a bad RELAX_SHM_SINGLE_COPY is left for init to report.
const bool g_prepared_at_load = [] {
  const char* env = std::getenv("RELAX_SHM_SINGLE_COPY");
  const std::string setting = (env && *env) ? env : "auto";
  if (!is_auto_on_off(setting)) return false;
  try {
    prepare_shm_transport(setting);
  } catch (const std::exception&) {
    return false;
  }
  return true;
}();

}  // namespace

}  // namespace relax
