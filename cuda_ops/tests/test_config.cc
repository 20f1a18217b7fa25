// Engine settings: environment parsing and the defaults chosen by topology.
#include <cstdlib>
#include <string>

#include "check.h"
#include "config.h"

using relax::EngineConfig;

TEST(idle_spin_defaults_to_polling_only_when_each_rank_has_a_core) {
  EngineConfig own_cores;
  own_cores.apply_topology_defaults(true, 2, 2);
  CHECK(own_cores.idle_spin_us > 0);
  EngineConfig oversubscribed;
  oversubscribed.apply_topology_defaults(true, 4, 2);
  CHECK_EQ(oversubscribed.idle_spin_us, 0.0);
  EngineConfig unknown_cores;
  unknown_cores.apply_topology_defaults(true, 1, 0);
  CHECK_EQ(unknown_cores.idle_spin_us, 0.0);
}

TEST(idle_spin_from_environment_overrides_the_default_and_rejects_negatives) {
  std::string error;
  setenv("RELAX_IDLE_SPIN_US", "0", 1);
  EngineConfig c = EngineConfig::from_environment(error);
  c.apply_topology_defaults(true, 1, 8);
  CHECK(error.empty());
  CHECK_EQ(c.idle_spin_us, 0.0);
  setenv("RELAX_IDLE_SPIN_US", "-5", 1);
  EngineConfig::from_environment(error);
  CHECK(error.find("RELAX_IDLE_SPIN_US=-5") != std::string::npos);
  unsetenv("RELAX_IDLE_SPIN_US");
}
