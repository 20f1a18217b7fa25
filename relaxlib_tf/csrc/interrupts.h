// A signal while TensorFlow waits in a relaxlib op. TF blocks the Python thread until an async
// kernel calls `done`, and Python runs signal handlers only between bytecodes, so a rank waiting
// for a peer that never submits could be stopped neither by Ctrl-C nor by pytest-timeout's
// SIGALRM. Here every submitted call is tracked; when SIGINT or SIGALRM arrives (seen through a
// handler chained in front of Python's), a watcher thread fails the calls that were waiting with
// an error naming the signal, TF returns to Python, and relaxlib_tf/_interrupts.py runs the
// signal's Python handler (KeyboardInterrupt) as TF turns that error into an exception. An
// abandoned call keeps its buffers alive until the core completes it or shuts down.
#pragma once

#include <mutex>

namespace relaxlib_tf {

struct Call;

namespace interrupts {

// Guards every tracked call's `abandoned` flag and its use of the OpKernelContext: the engine's
// callbacks hold it while they touch the context, the watcher while it fails the call.
std::mutex& Mutex();
// Starts tracking a call about to be submitted (and the watcher, once).
void Track(Call* call);
// Stops tracking a call (Mutex() held); false if the watcher already failed it.
bool UntrackLocked(Call* call);

}  // namespace interrupts
}  // namespace relaxlib_tf
