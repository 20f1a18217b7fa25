// The one rule of numeric settings (issue #49): a finite number, or a whole one for integer
// settings, within the setting's range; anything else fails init naming the variable and range.
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "check.h"
#include "engine/config.h"

using relax::EngineConfig;

namespace {

// The error from_environment reports with only `name`=`value` set.
std::string error_for(const char* name, const char* value) {
  setenv(name, value, 1);
  std::string error;
  EngineConfig::from_environment(error);
  unsetenv(name);
  return error;
}

}  // namespace

TEST(non_finite_and_out_of_range_settings_fail_naming_the_variable_and_range) {
  const std::vector<std::pair<const char*, const char*>> bad = {
      {"RELAX_CYCLE_TIME", "nan"},         {"RELAX_CYCLE_TIME", "inf"},
      {"RELAX_CYCLE_TIME", "1e30"},        {"RELAX_CYCLE_TIME", "-inf"},
      {"RELAX_CYCLE_TIME", "5000"},        {"RELAX_OP_TIMEOUT", "nan"},
      {"RELAX_IDLE_TICK_MAX", "nan"},      {"RELAX_IDLE_TICK_MAX", "-1"},
      {"RELAX_OP_TIMEOUT", "1e9"},         {"RELAX_STALL_CHECK_TIME", "inf"},
      {"RELAX_STALL_SHUTDOWN_TIME", "nan"}, {"RELAX_DEADLOCK_TIME", "nan"},
      {"RELAX_IDLE_SPIN_US", "nan"},       {"RELAX_HEAP_KEEP_MB", "inf"},
      {"RELAX_RING_SEGMENT_BYTES", "nan"}, {"RELAX_RING_SEGMENT_BYTES", "1e30"},
      {"RELAX_SHM_SLOT_BYTES", "nan"},     {"RELAX_SHM_SLOT_BYTES", "2147483648"},
      {"RELAX_FUSION_THRESHOLD", "1e30"},  {"RELAX_FUSION_THRESHOLD", "9223372036854775808"},
      {"RELAX_FUSION_THRESHOLD", "1.5"},   {"RELAX_FUSION_THRESHOLD", "-1"},
      {"RELAX_CACHE_CAPACITY", "nan"},     {"RELAX_RING_WINDOW", "1e30"},
      {"RELAX_GROUP_CACHE_SIZE", "inf"},   {"RELAX_MPI_ALLREDUCE_MAX_BYTES", "nan"},
      {"RELAX_MPI_ALLGATHER_MAX_BYTES", "1e30"}, {"RELAX_SHM_MIN_BYTES", "nan"},
      {"RELAX_LOCAL_SIZE", "two"},         {"RELAX_LOCAL_SIZE", "1e30"},
      {"RELAX_TCP_EAGER_LIMIT", "99999999999999"},
  };
  for (const auto& [name, value] : bad) {
    const std::string error = error_for(name, value);
    const bool named = error.find(std::string(name) + "=" + value + " is not a ") != std::string::npos;
    const bool ranged = error.find(" in [") != std::string::npos;
    if (!named || !ranged) check::fail(__FILE__, __LINE__, std::string(name) + "=" + value + " gave: '" + error + "'");
  }
}

TEST(the_horovod_name_is_named_when_it_was_the_one_set) {
  const std::string error = error_for("HOROVOD_CYCLE_TIME", "nan");
  CHECK(error.find("HOROVOD_CYCLE_TIME=nan is not a finite number in [0, 1000] (milliseconds)") != std::string::npos);
}

TEST(valid_settings_still_parse_exactly) {
  setenv("RELAX_CYCLE_TIME", "2.5", 1);
  setenv("RELAX_FUSION_THRESHOLD", "68719476736", 1);  // the 64 GiB maximum
  setenv("RELAX_OP_TIMEOUT", "86400", 1);
  setenv("RELAX_RING_SEGMENT_BYTES", "+4096", 1);
  setenv("RELAX_TCP_EAGER_LIMIT", "off", 1);
  std::string error;
  EngineConfig c = EngineConfig::from_environment(error);
  CHECK_EQ(error, std::string());
  CHECK_EQ(c.cycle_time_ms, 2.5);
  CHECK_EQ(c.fusion_threshold_bytes, int64_t{64} << 30);
  CHECK_EQ(c.stall_shutdown_seconds, 86400.0);
  CHECK_EQ(c.ring_segment_bytes, int64_t{4096});
  for (const char* name : {"RELAX_CYCLE_TIME", "RELAX_FUSION_THRESHOLD", "RELAX_OP_TIMEOUT", "RELAX_RING_SEGMENT_BYTES",
                           "RELAX_TCP_EAGER_LIMIT"}) {
    unsetenv(name);
  }
}

TEST(the_parse_rule_leaves_the_value_unchanged_on_failure) {
  std::string error;
  int64_t n = 7;
  CHECK(!relax::parse_integer_setting("X", "99999999999999999999", 0, 100, "", n, error));
  CHECK_EQ(n, int64_t{7});
  CHECK(!relax::parse_integer_setting("X", " 5", 0, 100, "", n, error));
  CHECK(!relax::parse_integer_setting("X", "0x10", 0, 100, "", n, error));
  double d = 1.0;
  CHECK(!relax::parse_real_setting("Y", "nan", 0, 10, "s", d, error));
  CHECK(!relax::parse_real_setting("Y", "1e400", 0, 10, "s", d, error));
  CHECK(!relax::parse_real_setting("Y", "3s", 0, 10, "s", d, error));
  CHECK_EQ(d, 1.0);
  CHECK(error.find("Y=nan is not a finite number in [0, 10] (s)") != std::string::npos);
  CHECK(relax::parse_real_setting("Y", "0.25", 0, 10, "s", d, error));
  CHECK_EQ(d, 0.25);
}
