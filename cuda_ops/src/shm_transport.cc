#include "shm_transport.h"

#include <mpi.h>

#include <cstdlib>
#include <fstream>
#include <stdexcept>

namespace relax {
namespace {

// Open MPI 5 renamed the shared-memory BTL from vader to sm.
#if defined(OPEN_MPI) && OMPI_MAJOR_VERSION >= 5
constexpr const char* kMechanismVariable = "OMPI_MCA_btl_sm_single_copy_mechanism";
#else
constexpr const char* kMechanismVariable = "OMPI_MCA_btl_vader_single_copy_mechanism";
#endif

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
// message. Inside a virtual machine that page walk costs more than a second memcpy: measured on
// 2 ranks, MPI_Allreduce of 1 MiB takes 122 us with CMA and 72 us copying through shared memory,
// and our ring at 256 MiB 63 ms against 44 ms.
std::string apply_shm_copy(const std::string& setting) {
#ifdef OPEN_MPI
  const char* user = std::getenv(kMechanismVariable);
  const bool user_chose = user && *user;
  const bool virtual_machine = running_under_hypervisor();
  if (decide_shm_copy(setting, user_chose, virtual_machine) == ShmCopy::kCopyInOut) {
    setenv(kMechanismVariable, "none", 1);  // unset or empty: the user did not choose
    return std::string("shared memory: copy-in/copy-out (") + kMechanismVariable + "=none; " +
           (setting == "off" ? "RELAX_SHM_SINGLE_COPY=off" : "virtual machine") + ")";
  }
  if (user_chose) return std::string("shared memory: ") + kMechanismVariable + "=" + user + " (set by the user)";
  return "shared memory: Open MPI's default single-copy mechanism";
#else
  (void)decide_shm_copy(setting, false, false);  // still reject a bad value
  return "shared memory: MPI's default (not Open MPI)";
#endif
}

}  // namespace relax
