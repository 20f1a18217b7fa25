// Fuzz target: the negotiation payload decoder (decode_payload, engine/coordinator.cc), which parses
// the bytes every peer all-gathers in a round (round_exchange.cc), then the coordinator's handling
// of what it decoded. Properties: no crash, leak or UB on any bytes; what decodes re-encodes to the
// same bytes (the encoding is canonical); a round of decoded messages is processed without crashing.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/coordinator.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  relax::RankMessage message;
  if (!relax::decode_payload(bytes, message)) return 0;
  // Canonical: decoding consumed every byte, so encoding the result must give them back.
  if (!bytes.empty() && relax::encode_payload(message) != bytes) std::abort();
  // Peers' descriptors feed the coordinator, which checks them against each other: two ranks
  // announce what was decoded, then a second round with one rank silent (a partial request).
  relax::Coordinator coordinator(2, 16);
  std::vector<relax::RankMessage> round(2, message);
  round[1].stall_aborts.clear();  // stall aborts come from rank 0 only
  coordinator.process(round, 0.0);
  std::vector<relax::RankMessage> half(2);
  half[0] = message;
  coordinator.process(half, 1.0);
  coordinator.stalled(2.0, 0.5);
  return 0;
}
