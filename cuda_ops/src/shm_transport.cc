#include "shm_transport.h"

#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <vector>

namespace relax {
namespace {

// Open MPI 5 renamed the shared-memory BTL from vader to sm (and accepts vader_ names as aliases).
#if defined(OPEN_MPI) && OMPI_MAJOR_VERSION >= 5
constexpr const char* kMechanismParameter = "btl_sm_single_copy_mechanism";
#else
constexpr const char* kMechanismParameter = "btl_vader_single_copy_mechanism";
#endif
bool is_mechanism_parameter(const std::string& name) {
  return name == "btl_sm_single_copy_mechanism" || name == "btl_vader_single_copy_mechanism";
}

std::string env_or(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v && *v) ? std::string(v) : fallback;
}

// Whether one of Open MPI's parameter files (the user's, the system's, or those listed in
// OMPI_MCA_mca_base_param_files) sets the mechanism: the environment would override it.
bool set_in_parameter_files() {
  std::vector<std::string> files;
  const std::string listed = env_or("OMPI_MCA_mca_base_param_files", "");
  if (!listed.empty()) {
    size_t start = 0;
    while (start <= listed.size()) {
      const size_t end = std::min(listed.find(':', start), listed.size());
      files.push_back(listed.substr(start, end - start));
      start = end + 1;
    }
  } else {
    files.push_back(env_or("HOME", "") + "/.openmpi/mca-params.conf");
    files.push_back("/etc/openmpi/openmpi-mca-params.conf");
    const std::string prefix = env_or("OPAL_PREFIX", "");
    if (!prefix.empty()) files.push_back(prefix + "/etc/openmpi-mca-params.conf");
  }
  for (const std::string& path : files) {
    std::ifstream in(path);
    std::string line;
    while (std::getline(in, line)) {
      const size_t first = line.find_first_not_of(" \t");
      if (first == std::string::npos || line[first] == '#') continue;
      const size_t equals = line.find('=', first);
      if (equals == std::string::npos) continue;
      std::string name = line.substr(first, equals - first);
      name.erase(name.find_last_not_of(" \t") + 1);
      if (is_mechanism_parameter(name)) return true;
    }
  }
  return false;
}

bool running_under_hypervisor() {
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (line.rfind("flags", 0) == 0) return line.find(" hypervisor") != std::string::npos;
  }
  return false;
}

}  // namespace

ShmCopy decide_shm_copy(const std::string& setting, bool user_chose, bool virtual_machine) {
  if (setting == "on") return ShmCopy::kMpiDefault;
  if (setting == "off") return user_chose ? ShmCopy::kMpiDefault : ShmCopy::kCopyInOut;
  if (setting == "auto") return (!user_chose && virtual_machine) ? ShmCopy::kCopyInOut : ShmCopy::kMpiDefault;
  throw std::invalid_argument("RELAX_SHM_SINGLE_COPY=" + setting + " is not one of auto, on, off");
}

// Single-copy transfers (CMA, process_vm_readv) pin each 4 KiB page of the peer's buffer on every
// message. Inside a virtual machine that page walk costs more than a second memcpy: on 2 ranks
// MPI_Allreduce of 1 MiB takes 125 us with CMA and 73 us copying through shared memory (more
// figures in docs/performance.md).
std::string apply_shm_copy(const std::string& setting) {
#ifdef OPEN_MPI
  const std::string variable = std::string("OMPI_MCA_") + kMechanismParameter;
  const std::string user = env_or(variable.c_str(), env_or("OMPI_MCA_btl_vader_single_copy_mechanism", ""));
  const bool in_files = user.empty() && set_in_parameter_files();
  const bool user_chose = !user.empty() || in_files;
  const bool virtual_machine = running_under_hypervisor();
  if (decide_shm_copy(setting, user_chose, virtual_machine) == ShmCopy::kCopyInOut) {
    setenv(variable.c_str(), "none", 1);  // unset or empty: the user did not choose
    return "shared memory: copy-in/copy-out (" + variable + "=none; " +
           (setting == "off" ? "RELAX_SHM_SINGLE_COPY=off" : "virtual machine") + ")";
  }
  if (in_files) return "shared memory: the single-copy mechanism set in an Open MPI parameter file";
  if (user_chose) return "shared memory: single-copy mechanism " + user + " (set by the user)";
  return "shared memory: Open MPI's default single-copy mechanism";
#else
  (void)decide_shm_copy(setting, false, false);  // still reject a bad value
  return "shared memory: MPI's default (not Open MPI)";
#endif
}

}  // namespace relax
