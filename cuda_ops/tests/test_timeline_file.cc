// The timeline file is never a way to truncate someone else's file: a hard link planted at the
// name is refused before anything is truncated (issue #49; the symbolic-link case is in
// test_abi_validation.cc).
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "check.h"
#include "engine/timeline.h"

TEST(the_timeline_refuses_a_hard_link_and_leaves_its_target_whole) {
  char dir_template[] = "/tmp/relax-timeline-XXXXXX";
  const char* dir = mkdtemp(dir_template);
  CHECK(dir != nullptr);
  if (!dir) return;
  const std::string victim = std::string(dir) + "/victim.txt";
  const std::string planted = std::string(dir) + "/timeline.json";
  { std::ofstream(victim) << "precious"; }
  CHECK_EQ(link(victim.c_str(), planted.c_str()), 0);
  relax::Timeline timeline;
  const relax::Status s = timeline.start(planted, false, 0);
  CHECK(!s.is_ok());
  CHECK(s.message.find("hard link") != std::string::npos);
  CHECK(!timeline.active());
  struct stat st {};
  CHECK_EQ(stat(victim.c_str(), &st), 0);
  CHECK_EQ(static_cast<long>(st.st_size), 8L);  // "precious" was not truncated
  unlink(planted.c_str());
  // Once the planted name is gone, the same path works, run after run (O_TRUNC's reason).
  for (int run = 0; run < 2; ++run) {
    CHECK(timeline.start(planted, false, 0).is_ok());
    timeline.stop();
  }
  unlink(planted.c_str());
  unlink(victim.c_str());
  rmdir(dir);
}
