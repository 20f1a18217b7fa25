// Negotiation payloads that claim more entries than their bytes can hold (found by fuzz_negotiation):
// decoding must refuse them without first allocating room for the claimed count.
#include <string>

#include "check.h"
#include "engine/coordinator.h"

namespace {

std::string u32_bytes(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }

}  // namespace

TEST(payload_claiming_billions_of_descriptors_is_malformed) {
  // Four billion descriptors announced, a few bytes present: resizing for them first asked for
  // hundreds of GiB (std::bad_alloc, or an AddressSanitizer abort) before noticing the end.
  const std::string bytes = u32_bytes(0xFFFFFFFFu) + "abc";
  relax::RankMessage message;
  bool decoded = true;
  try {
    decoded = relax::decode_payload(bytes, message);
  } catch (const std::exception& e) {
    check::fail(__FILE__, __LINE__, std::string("decode_payload threw ") + e.what());
  }
  CHECK(!decoded);
  CHECK(message.descriptors.capacity() < 16);
}

TEST(payload_claiming_billions_of_stall_aborts_is_malformed) {
  const std::string bytes = u32_bytes(0) + u32_bytes(0xFFFFFFF0u) + u32_bytes(1) + "x";
  relax::RankMessage message;
  bool decoded = true;
  try {
    decoded = relax::decode_payload(bytes, message);
  } catch (const std::exception& e) {
    check::fail(__FILE__, __LINE__, std::string("decode_payload threw ") + e.what());
  }
  CHECK(!decoded);
  CHECK(message.stall_aborts.capacity() < 16);
}
