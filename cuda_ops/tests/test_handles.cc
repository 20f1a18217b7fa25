// Handle table: completion, and the count of waiting callers that decides whether shared-memory
// barriers may poll (a thread computing for the framework needs the core otherwise).
#include <chrono>
#include <thread>

#include "check.h"
#include "engine/handles.h"

using relax::HandleTable;

namespace {

// Polls until `table` counts `expected` waiting callers, for at most two seconds.
bool reaches(const HandleTable& table, int expected) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (table.waiting_callers().load() != expected) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

}  // namespace

TEST(a_blocked_wait_counts_as_a_waiting_caller_until_its_request_completes) {
  HandleTable table;
  const relax_handle_t h = table.create(true);
  CHECK_EQ(table.waiting_callers().load(), 0);
  int status = -1;
  std::thread waiter([&] { status = table.wait(h); });
  CHECK(reaches(table, 1));
  table.complete(h, RELAX_OK, "");
  waiter.join();
  CHECK_EQ(status, RELAX_OK);
  CHECK_EQ(table.waiting_callers().load(), 0);
}

TEST(a_wait_with_a_timeout_counts_while_it_waits_and_not_after_it_gives_up) {
  HandleTable table;
  const relax_handle_t h = table.create(true);
  int status = -1;
  std::thread waiter([&] { status = table.wait_for(h, 200); });
  CHECK(reaches(table, 1));
  waiter.join();
  CHECK_EQ(status, RELAX_PENDING);
  CHECK_EQ(table.waiting_callers().load(), 0);
}

TEST(a_completed_request_is_returned_without_counting_a_wait) {
  HandleTable table;
  const relax_handle_t h = table.create(true);
  table.complete(h, RELAX_OK, "");
  CHECK_EQ(table.wait(h), RELAX_OK);
  CHECK_EQ(table.wait_for(h, 0), RELAX_OK);
  CHECK_EQ(table.waiting_callers().load(), 0);
}

TEST(external_waits_and_driving_callers_count_for_their_duration) {
  HandleTable table;
  table.note_external_wait(true);  // a framework running an op synchronously
  CHECK_EQ(table.waiting_callers().load(), 1);
  {
    HandleTable::WaitingCaller driving(table);  // a caller running its own request's rounds
    CHECK_EQ(table.waiting_callers().load(), 2);
  }
  CHECK_EQ(table.waiting_callers().load(), 1);
  table.note_external_wait(false);
  CHECK_EQ(table.waiting_callers().load(), 0);
}
