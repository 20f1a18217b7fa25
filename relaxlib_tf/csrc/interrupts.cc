// Failing waiting TF ops on SIGINT / SIGALRM (see interrupts.h).
#include "interrupts.h"

#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "bridge.h"

namespace relaxlib_tf {
namespace interrupts {
namespace {

constexpr int kSignals[] = {SIGINT, SIGALRM};
constexpr auto kTick = std::chrono::milliseconds(50);

std::atomic<uint64_t> g_signals_seen{0};
std::atomic<uint32_t> g_deferred{0};  // bit per signal number held back for the watcher
std::atomic<int> g_last_signal{0};
std::atomic<int> g_tracked{0};        // calls being waited for
struct sigaction g_previous[NSIG];

void Forward(int signo, siginfo_t* info, void* context) {
  const struct sigaction& previous = g_previous[signo];
  if (previous.sa_flags & SA_SIGINFO) {
    if (previous.sa_sigaction) previous.sa_sigaction(signo, info, context);
  } else if (previous.sa_handler != SIG_DFL && previous.sa_handler != SIG_IGN && previous.sa_handler) {
    previous.sa_handler(signo);
  }
}

// Runs in whichever thread the signal hits; only async-signal-safe work. While relaxlib ops are
// waited for, the signal is held back and the watcher fails those ops with an error naming it;
// relaxlib_tf/_interrupts.py runs the signal's Python handler when TF turns that error into a
// Python exception (a handler that ran while pybind11 builds the exception would corrupt it).
// Otherwise the signal goes to the handler it replaced (Python's) at once.
void OnSignal(int signo, siginfo_t* info, void* context) {
  if (g_tracked.load(std::memory_order_acquire) > 0) {
    g_last_signal.store(signo, std::memory_order_relaxed);
    g_deferred.fetch_or(1u << signo, std::memory_order_relaxed);
    g_signals_seen.fetch_add(1, std::memory_order_release);
    return;
  }
  Forward(signo, info, context);
}

// Puts OnSignal in front of the current handler of each signal that has a handler function (not
// the default action or "ignore": those stay as they are). Repeated on every watcher tick because
// Python replaces the C handler whenever signal.signal() is called (pytest-timeout does per test).
void HookSignals() {
  for (int signo : kSignals) {
    struct sigaction current {};
    if (sigaction(signo, nullptr, &current) != 0) continue;
    const bool ours = (current.sa_flags & SA_SIGINFO) && current.sa_sigaction == &OnSignal;
    const bool has_function = (current.sa_flags & SA_SIGINFO) ? current.sa_sigaction != nullptr
                                                                : current.sa_handler != SIG_DFL &&
                                                                      current.sa_handler != SIG_IGN;
    if (ours || !has_function) continue;
    g_previous[signo] = current;  // OnSignal is not installed now, so nothing reads this meanwhile
    struct sigaction mine {};
    mine.sa_sigaction = &OnSignal;
    mine.sa_flags = SA_SIGINFO | (current.sa_flags & SA_RESTART);
    sigemptyset(&mine.sa_mask);
    sigaction(signo, &mine, nullptr);
  }
}

struct State {
  std::mutex mutex;  // Mutex()
  std::condition_variable wake;
  std::unordered_map<Call*, uint64_t> calls;  // tracked call -> signals seen when it was submitted
  bool watching = false;
};

// Never destroyed: the watcher thread may still wait on it while the process exits.
State& state() {
  static State* s = new State;
  return *s;
}

// Fails every tracked call submitted before the latest signal; returns what to run after
// unlocking: their `done` callbacks.
std::vector<AsyncOpKernel::DoneCallback> AbandonLocked(State& s, uint64_t seen, int signo) {
  std::vector<AsyncOpKernel::DoneCallback> dones;
  for (auto it = s.calls.begin(); it != s.calls.end();) {
    if (it->second >= seen) {
      ++it;
      continue;
    }
    Call* call = it->first;
    call->abandoned = true;
    call->ctx->SetStatus(Status(absl::StatusCode::kCancelled,
                                "[RelaxError] interrupted by signal " + std::to_string(signo) +
                                    " while waiting for a relaxlib collective (its peers may not have submitted "
                                    "it)"));
    dones.push_back(std::move(call->done));
    it = s.calls.erase(it);
    g_tracked.fetch_sub(1, std::memory_order_release);
  }
  return dones;
}

void Watch() {
  State& s = state();
  std::unique_lock<std::mutex> lock(s.mutex);
  for (;;) {
    s.wake.wait(lock, [&] { return !s.calls.empty() || g_deferred.load() != 0; });
    s.wake.wait_for(lock, kTick);
    HookSignals();
    const uint32_t deferred = g_deferred.exchange(0);
    if (deferred == 0) continue;
    std::vector<AsyncOpKernel::DoneCallback> dones =
        AbandonLocked(s, g_signals_seen.load(std::memory_order_acquire), g_last_signal.load());
    lock.unlock();
    for (auto& done : dones) done();  // TF raises the failure in Python, which runs the handler
    if (dones.empty()) {  // the ops completed meanwhile: nothing carries the signal to Python
      for (int signo = 1; signo < 32; ++signo) {
        if (deferred & (1u << signo)) Forward(signo, nullptr, nullptr);
      }
    }
    lock.lock();
  }
}

}  // namespace

std::mutex& Mutex() { return state().mutex; }

void Track(Call* call) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.watching) {
    s.watching = true;
    HookSignals();
    std::thread(Watch).detach();
  }
  s.calls.emplace(call, g_signals_seen.load(std::memory_order_acquire));
  g_tracked.fetch_add(1, std::memory_order_release);
  if (s.calls.size() == 1) s.wake.notify_one();
}

bool UntrackLocked(Call* call) {
  if (state().calls.erase(call) == 0) return false;
  g_tracked.fetch_sub(1, std::memory_order_release);
  return true;
}

}  // namespace interrupts
}  // namespace relaxlib_tf
