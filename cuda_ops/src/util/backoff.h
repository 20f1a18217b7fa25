// Sleeping while a peer is late, for waits that poll: pauses grow with the time waited.
#pragma once

namespace relax {

// Sleeps `fraction` of `waited_us` (5 to 100 us): short while a peer is microseconds away, so
// the wait ends soon after it arrives; longer when it is computing, so this thread leaves the
// cores to it. A wait overshoots by at most that fraction (or 100 us). Cuts the calling thread's
// timer slack to 1 us once (the default 50 us would stretch the short pauses).
void backoff_pause(double waited_us, double fraction = 0.25);

}  // namespace relax
