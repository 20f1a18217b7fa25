#include "util/backoff.h"

#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace relax {

void backoff_pause(double waited_us, double fraction) {
  thread_local const bool slack_set = prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0) == 0;
  (void)slack_set;
  const auto pause = std::clamp(static_cast<long long>(waited_us * fraction), 5LL, 100LL);
  std::this_thread::sleep_for(std::chrono::microseconds(pause));
}

}  // namespace relax
