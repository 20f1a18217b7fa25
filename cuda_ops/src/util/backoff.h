// Sleeping while a peer is late, for waits that poll: pauses grow with the time waited.
#pragma once

#include <sched.h>

#include "util/types.h"

namespace relax {

// Sleeps `fraction` of `waited_us` (5 to 100 us): short while a peer is microseconds away, so
// the wait ends soon after it arrives; longer when it is computing, so this thread leaves the
// cores to it. A wait overshoots by at most that fraction (or 100 us). Cuts the calling thread's
// timer slack to 1 us once (the default 50 us would stretch the short pauses).
void backoff_pause(double waited_us, double fraction = 0.25);

// Calls `poll(done)` (returns an error code, 0 for success, and sets `done`) until it fails or
// reports done: without pause for the first `busy_us` (yielding the core between polls when
// `yield`), then with backoff_pause(waited, fraction) between polls. Returns the last code. The
// clock is first read after a poll that did not finish, so a wait that is over at once costs none.
// With `timeout_s` > 0 it gives up after that many seconds, sets `timed_out` and returns 0 (a
// peer that never answers must not hold the caller forever).
template <class Poll>
int poll_with_backoff(Poll poll, double busy_us, bool yield, double fraction, double timeout_s, bool& timed_out) {
  double start = -1;
  timed_out = false;
  for (;;) {
    int done = 0;
    const int rc = poll(done);
    if (rc != 0 || done) return rc;
    const double now = steady_seconds();
    if (start < 0) start = now;
    const double waited_us = (now - start) * 1e6;
    if (timeout_s > 0 && waited_us >= timeout_s * 1e6) {
      timed_out = true;
      return 0;
    }
    if (waited_us >= busy_us) {
      backoff_pause(waited_us, fraction);
    } else if (yield) {
      sched_yield();
    }
  }
}

// Without a time limit.
template <class Poll>
int poll_with_backoff(Poll poll, double busy_us, bool yield, double fraction) {
  bool timed_out = false;
  return poll_with_backoff(poll, busy_us, yield, fraction, 0.0, timed_out);
}

}  // namespace relax
