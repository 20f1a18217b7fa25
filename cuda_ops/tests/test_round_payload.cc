// A negotiation round's variable-size all-gather has int counts and displacements: payloads that
// would take the round past 2 GiB fail it naming the rank, instead of wrapping a displacement
// negative (issue #49, finding 8). Every rank places the same records, so every rank fails alike.
#include <climits>
#include <string>
#include <vector>

#include "check.h"
#include "engine/round_exchange.h"

namespace {

// Places `announced` rank by rank as exchange_round does; the first failure, or OK.
relax::Status place_all(const std::vector<uint32_t>& announced, std::vector<int>& lengths, std::vector<int>& displs) {
  int64_t total = 0;
  lengths.assign(announced.size(), -1);
  displs.assign(announced.size(), -1);
  for (size_t r = 0; r < announced.size(); ++r) {
    relax::Status s = relax::place_payload(static_cast<int>(r), announced[r], total, lengths[r], displs[r]);
    if (!s.is_ok()) return s;
  }
  return relax::Status::ok();
}

}  // namespace

TEST(round_payloads_are_laid_end_to_end) {
  std::vector<int> lengths, displs;
  CHECK(place_all({3, 0, 5}, lengths, displs).is_ok());
  CHECK(lengths == (std::vector<int>{3, 0, 5}));
  CHECK(displs == (std::vector<int>{0, 3, 3}));
  CHECK(place_all({INT_MAX}, lengths, displs).is_ok());  // exactly 2 GiB - 1 still fits
}

TEST(round_payloads_past_2_gib_fail_naming_the_rank) {
  std::vector<int> lengths, displs;
  const uint32_t half = static_cast<uint32_t>(INT_MAX / 2) + 1;
  relax::Status s = place_all({10, half, half}, lengths, displs);  // the third would start past INT_MAX
  CHECK(!s.is_ok());
  CHECK(s.message.find("rank 2") != std::string::npos);
  CHECK(s.message.find("past 2 GiB") != std::string::npos);
  CHECK(displs[2] == -1);  // nothing placed for the rank that failed

  s = place_all({7, relax::kPayloadTooLarge}, lengths, displs);  // a sender's own payload over 2 GiB
  CHECK(!s.is_ok());
  CHECK(s.message.find("rank 1 announced more than 2 GiB") != std::string::npos);
}
