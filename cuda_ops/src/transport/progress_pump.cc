#include "transport/progress_pump.h"

#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "transport/ulfm.h"

namespace relax {
namespace {

// A tenth of Open MPI's shortest sensible heartbeat period (its default is 3 s).
constexpr int kPumpMs = 100;

std::mutex g_mutex;
std::condition_variable g_wake;
bool g_stopping = false;
std::thread* g_thread = nullptr;  // owned here; never destroyed after exit handlers start

void pump() {
  std::unique_lock<std::mutex> lock(g_mutex);
  while (!g_wake.wait_for(lock, std::chrono::milliseconds(kPumpMs), [] { return g_stopping; })) {
    drive_mpi_progress(MPI_COMM_SELF);  // where the detector's timers run
  }
}

}  // namespace

void start_progress_pump() {
  int provided = 0;
  MPI_Query_thread(&provided);
  if (provided < MPI_THREAD_MULTIPLE || !ulfm_enabled(nullptr)) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_thread != nullptr) return;
  g_stopping = false;
  g_thread = new std::thread(pump);
}

void stop_progress_pump() {
  std::thread* thread = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    thread = g_thread;
    g_thread = nullptr;
    g_stopping = true;
  }
  g_wake.notify_all();
  if (thread == nullptr) return;
  thread->join();
  delete thread;
}

}  // namespace relax
