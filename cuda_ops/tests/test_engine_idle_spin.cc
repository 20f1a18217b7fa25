// The engine's idle poll (RELAX_IDLE_SPIN_US) must end when the engine stops, whatever its
// length: config parsing caps the setting, but the loop must not rely on that.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <thread>
#include <vector>

#include "check.h"
#include "engine/engine.h"
#include "engine/handles.h"
#include "transport/mpi_context.h"

TEST(an_idle_spin_of_any_length_ends_when_the_engine_stops) {
  relax::MpiContext mpi;
  const relax::Status opened = mpi.open();  // a singleton MPI job of one rank
  CHECK(opened.is_ok());
  if (!opened.is_ok()) return;
  relax::HandleTable handles;
  relax::EngineConfig config;
  config.apply_topology_defaults(true, 1, 4, false);
  config.shm_collectives = false;
  config.idle_spin_us = 1e9;  // 1000 s: far past what config parsing accepts
  relax::Engine engine(mpi, handles, config);
  engine.start();
  // A completed request makes the round progress, after which the engine polls while idle.
  relax::LocalRequest request;
  request.desc.name = "idle.spin.barrier";
  request.desc.type = RELAX_REQ_BARRIER;
  request.handle = handles.create(true);
  const relax_handle_t handle = request.handle;
  std::vector<relax::LocalRequest> requests;
  requests.push_back(std::move(request));
  CHECK(engine.submit(0, std::move(requests)).is_ok());
  CHECK_EQ(handles.wait(handle), RELAX_OK);
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    engine.stop();
    stopped.store(true);
  });
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);  // a hang guard only
  while (!stopped.load() && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHECK(stopped.load());
  if (!stopped.load()) {  // the engine thread spins on: joining it would hang the whole test run
    std::cout << "[FAIL] an_idle_spin_of_any_length_ends_when_the_engine_stops: stop() did not return\n";
    std::_Exit(1);
  }
  stopper.join();
  handles.release(handle);
}
