// Engine settings: environment parsing, the defaults chosen by topology, and where timelines go.
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "check.h"
#include "engine/config.h"
#include "engine/timeline.h"
#include "transport/shm_transport.h"
#include "transport/tcp_transport.h"

using relax::EngineConfig;

TEST(idle_spin_defaults_to_polling_only_when_each_rank_has_a_core) {
  EngineConfig own_cores;
  own_cores.apply_topology_defaults(true, 2, 2, false);
  CHECK(own_cores.idle_spin_us > 0);
  EngineConfig oversubscribed;
  oversubscribed.apply_topology_defaults(true, 4, 2, true);
  CHECK_EQ(oversubscribed.idle_spin_us, 0.0);
  EngineConfig unknown_cores;
  unknown_cores.apply_topology_defaults(true, 1, 0, false);
  CHECK_EQ(unknown_cores.idle_spin_us, 0.0);
}

TEST(idle_spin_from_environment_overrides_the_default_and_rejects_negatives) {
  std::string error;
  setenv("RELAX_IDLE_SPIN_US", "0", 1);
  EngineConfig c = EngineConfig::from_environment(error);
  c.apply_topology_defaults(true, 1, 8, false);
  CHECK(error.empty());
  CHECK_EQ(c.idle_spin_us, 0.0);
  setenv("RELAX_IDLE_SPIN_US", "-5", 1);
  EngineConfig::from_environment(error);
  CHECK(error.find("RELAX_IDLE_SPIN_US=-5") != std::string::npos);
  unsetenv("RELAX_IDLE_SPIN_US");
}

TEST(shared_memory_copy_in_out_on_virtual_machines_unless_the_user_chose) {
  using relax::ShmCopy;
  using relax::decide_shm_copy;
  CHECK(decide_shm_copy("auto", false, true) == ShmCopy::kCopyInOut);
  CHECK(decide_shm_copy("auto", false, false) == ShmCopy::kMpiDefault);
  CHECK(decide_shm_copy("auto", true, true) == ShmCopy::kMpiDefault);  // mpirun --mca ... wins
  CHECK(decide_shm_copy("off", false, false) == ShmCopy::kCopyInOut);
  CHECK(decide_shm_copy("off", true, false) == ShmCopy::kMpiDefault);
  CHECK(decide_shm_copy("on", false, true) == ShmCopy::kMpiDefault);
  bool threw = false;
  try {
    decide_shm_copy("maybe", false, true);
  } catch (const std::invalid_argument& e) {
    threw = std::string(e.what()).find("RELAX_SHM_SINGLE_COPY=maybe") != std::string::npos;
  }
  CHECK(threw);
}

TEST(shared_memory_setting_from_environment_is_validated) {
  std::string error;
  setenv("RELAX_SHM_SINGLE_COPY", "off", 1);
  CHECK_EQ(EngineConfig::from_environment(error).shm_single_copy, std::string("off"));
  CHECK(error.empty());
  setenv("RELAX_SHM_SINGLE_COPY", "never", 1);
  EngineConfig::from_environment(error);
  CHECK(error.find("RELAX_SHM_SINGLE_COPY=never is not one of auto, on, off") != std::string::npos);
  unsetenv("RELAX_SHM_SINGLE_COPY");
}

TEST(shared_memory_collectives_are_on_for_one_node_and_off_across_nodes) {
  std::string error;
  EngineConfig one_node = EngineConfig::from_environment(error);
  one_node.apply_topology_defaults(true, 4, 2, true);
  CHECK(error.empty());
  CHECK(one_node.shm_collectives);
  EngineConfig two_nodes = EngineConfig::from_environment(error);
  two_nodes.apply_topology_defaults(false, 2, 2, false);
  CHECK(!two_nodes.shm_collectives);
  setenv("RELAX_SHM_COLLECTIVES", "off", 1);
  setenv("RELAX_SHM_SLOT_BYTES", "65536", 1);
  EngineConfig off = EngineConfig::from_environment(error);
  CHECK(error.empty());
  CHECK(!off.shm_collectives);
  CHECK_EQ(off.shm_slot_bytes, int64_t{65536});
  setenv("RELAX_SHM_COLLECTIVES", "yes", 1);
  setenv("RELAX_SHM_SLOT_BYTES", "10", 1);
  EngineConfig::from_environment(error);
  CHECK(error.find("RELAX_SHM_COLLECTIVES=yes is not one of auto, on, off") != std::string::npos);
  CHECK(error.find("RELAX_SHM_SLOT_BYTES=10") != std::string::npos);
  error.clear();
  setenv("RELAX_SHM_COLLECTIVES", "on", 1);
  setenv("RELAX_SHM_SLOT_BYTES", "2000000000", 1);
  EngineConfig capped = EngineConfig::from_environment(error);
  CHECK(capped.shm_collectives);
  CHECK(error.find("RELAX_SHM_SLOT_BYTES=2000000000 is not a whole number in [4096, 1073741824] (bytes)") !=
        std::string::npos);
  unsetenv("RELAX_SHM_COLLECTIVES");
  unsetenv("RELAX_SHM_SLOT_BYTES");
}

TEST(the_tcp_ring_is_used_across_nodes_unless_switched) {
  std::string error;
  EngineConfig one_node = EngineConfig::from_environment(error);
  one_node.apply_topology_defaults(true, 2, 2, false);
  CHECK(!one_node.use_tcp_ring);
  EngineConfig two_nodes = EngineConfig::from_environment(error);
  two_nodes.apply_topology_defaults(false, 2, 2, false);
  CHECK(two_nodes.use_tcp_ring);
  CHECK_EQ(two_nodes.mpi_allreduce_max_bytes, int64_t{4 << 10});  // MPI only for tiny messages
  EngineConfig sharing_cores = EngineConfig::from_environment(error);
  sharing_cores.apply_topology_defaults(false, 4, 2, true);  // MPI's blocking collectives would spin
  CHECK_EQ(sharing_cores.mpi_allreduce_max_bytes, int64_t{0});
  CHECK_EQ(sharing_cores.mpi_allgather_max_bytes, int64_t{0});
  EngineConfig own_cores_here = EngineConfig::from_environment(error);
  own_cores_here.apply_topology_defaults(false, 2, 8, true);  // another host shares: the agreed flag decides
  CHECK_EQ(own_cores_here.mpi_allreduce_max_bytes, int64_t{0});
  setenv("RELAX_MPI_ALLREDUCE_MAX_BYTES", "4096", 1);
  EngineConfig chosen = EngineConfig::from_environment(error);
  chosen.apply_topology_defaults(false, 4, 2, true);  // a value you set wins
  CHECK_EQ(chosen.mpi_allreduce_max_bytes, int64_t{4096});
  unsetenv("RELAX_MPI_ALLREDUCE_MAX_BYTES");
  setenv("RELAX_TCP_RING", "off", 1);
  EngineConfig off = EngineConfig::from_environment(error);
  off.apply_topology_defaults(false, 2, 2, false);
  CHECK(!off.use_tcp_ring);
  CHECK_EQ(off.mpi_allreduce_max_bytes, int64_t{256 << 10});
  setenv("RELAX_TCP_RING", "on", 1);
  EngineConfig on = EngineConfig::from_environment(error);
  on.apply_topology_defaults(true, 2, 2, false);
  CHECK(on.use_tcp_ring);
  CHECK(error.empty());
  setenv("RELAX_TCP_RING", "maybe", 1);
  EngineConfig::from_environment(error);
  CHECK(error.find("RELAX_TCP_RING=maybe is not one of auto, on, off") != std::string::npos);
  unsetenv("RELAX_TCP_RING");
}

TEST(tcp_ring_segments_fit_in_one_eager_message_unless_turned_off) {
  using relax::decide_tcp_eager_limit;
  const int64_t auto_default = decide_tcp_eager_limit("auto", -1);
  CHECK(auto_default > relax::kCrossNodeRingSegmentBytes);  // room for Open MPI's header
  CHECK(auto_default - relax::kCrossNodeRingSegmentBytes <= (64 << 10));
  CHECK(decide_tcp_eager_limit("auto", 4 << 20) > (4 << 20));
  CHECK_EQ(decide_tcp_eager_limit("off", -1), int64_t{0});
  CHECK_EQ(decide_tcp_eager_limit("1048576", -1), int64_t{1048576});
  for (const char* bad : {"always", "-5", "12", "1e6", ""}) {
    bool threw = false;
    try {
      decide_tcp_eager_limit(bad, -1);
    } catch (const std::invalid_argument& e) {
      threw = std::string(e.what()).find(std::string("RELAX_TCP_EAGER_LIMIT=") + bad + " ") != std::string::npos;
    }
    CHECK(threw);
  }
}

TEST(tcp_eager_setting_from_environment_is_validated) {
  std::string error;
  setenv("RELAX_TCP_EAGER_LIMIT", "off", 1);
  CHECK_EQ(EngineConfig::from_environment(error).tcp_eager_limit, std::string("off"));
  CHECK(error.empty());
  setenv("RELAX_TCP_EAGER_LIMIT", "huge", 1);
  CHECK_EQ(EngineConfig::from_environment(error).tcp_eager_limit, std::string("auto"));
  CHECK(error.find("RELAX_TCP_EAGER_LIMIT=huge") != std::string::npos);
  unsetenv("RELAX_TCP_EAGER_LIMIT");
}

TEST(waits_yield_the_core_only_when_ranks_outnumber_cores_unless_set) {
  EngineConfig own_cores;
  own_cores.apply_topology_defaults(false, 2, 2, false);
  CHECK(!own_cores.yield_while_waiting);
  EngineConfig oversubscribed;
  oversubscribed.apply_topology_defaults(false, 4, 2, true);
  CHECK(oversubscribed.yield_while_waiting);
  EngineConfig forced_off;
  forced_off.wait_yield = "off";
  forced_off.apply_topology_defaults(false, 4, 2, true);
  CHECK(!forced_off.yield_while_waiting);
  EngineConfig forced_on;
  forced_on.wait_yield = "on";
  forced_on.apply_topology_defaults(true, 1, 8, false);
  CHECK(forced_on.yield_while_waiting);
  std::string error;
  setenv("RELAX_WAIT_YIELD", "sometimes", 1);
  EngineConfig::from_environment(error);
  CHECK(error.find("RELAX_WAIT_YIELD=sometimes is not one of auto, on, off") != std::string::npos);
  unsetenv("RELAX_WAIT_YIELD");
}

TEST(timeline_path_names_the_rank_or_belongs_to_rank_zero) {
  using relax::timeline_path_for_rank;
  CHECK_EQ(timeline_path_for_rank("/tmp/tl.json", 0), std::string("/tmp/tl.json"));
  CHECK_EQ(timeline_path_for_rank("/tmp/tl.json", 3), std::string());
  CHECK_EQ(timeline_path_for_rank("/tmp/tl.{rank}.json", 3), std::string("/tmp/tl.3.json"));
  CHECK_EQ(timeline_path_for_rank("/tmp/{rank}/tl.{rank}.json", 12), std::string("/tmp/12/tl.12.json"));
  CHECK_EQ(timeline_path_for_rank("/tmp/tl.{rank}.json", 0), std::string("/tmp/tl.0.json"));
}
