#include "transport/lost_processes.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "transport/liveness.h"
#include "util/logging.h"

namespace relax {

pid_t parent_of(int64_t pid) {
  if (pid <= 0) return -1;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  // "pid (command) state ppid ...": the command may hold spaces and parentheses.
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(text.substr(close + 1));
  std::string state;
  long long ppid = -1;
  if (!(rest >> state >> ppid)) return -1;
  return static_cast<pid_t>(ppid);
}

int end_sibling_processes(const std::vector<int64_t>& pids, const char* why) {
  int signalled = 0;
  for (int64_t pid : pids) {
    if (pid <= 0 || pid == static_cast<int64_t>(getpid()) || parent_of(pid) != getppid()) continue;
    RELAX_LOG(Warning, "killing process " << pid << " on this host, " << why);
    if (kill(static_cast<pid_t>(pid), SIGKILL) == 0) {
      ++signalled;
    } else if (errno != ESRCH) {  // one already gone is left to MPI, which reports it as any loss
      RELAX_LOG(Warning, "cannot kill process " << pid << ": " << std::strerror(errno));
    }
  }
  return signalled;
}

int end_lost_processes() {
  return end_sibling_processes(lost_peer_pids(),
                               "a rank that MPI declared failed (it stopped answering) and the others went on without");
}

int end_silent_processes() {
  return end_sibling_processes(silent_peer_pids(),
                               "evicting a rank that did not answer within RELAX_OP_TIMEOUT "
                               "(RELAX_ELASTIC_EVICT=0 keeps it and ends the job)");
}

}  // namespace relax
