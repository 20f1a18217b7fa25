// Compressed scatter-reduce (BAGUA's C_LP_S), semantics in docs/architecture.md: each rank adds its
// worker error e to its input, encodes it chunk-wise and sends chunk j to rank j; rank i decodes
// what it received for chunk i, reduces (sum or average), adds its owner error f, re-encodes and
// the encoded chunks are all-gathered; every rank decodes the same bytes, so all results agree.
// e' = v - Q(v) and f' = s - Q(s) are updated only when the whole operation succeeds.
// With two ranks there is no owner stage: each owner all-gathers its own encoding of its chunk
// (the same bytes as a re-encoded sum), both ranks add the two decoded encodings, and f stays 0.
//
// A chunk larger than kCompressedPartElements travels in parts: every chunk is split into the
// same number of parts (even_counts of the chunk), each encoded on its own (its own marker and
// codec header, e.g. its own scale). Between nodes the parts are pipelined: one part's transfer
// overlaps the encoding, reduction and decoding of others.
#pragma once

#include <cstdint>
#include <vector>

#include "codecs/codec.h"
#include "collectives/collectives.h"
#include "collectives/pieces.h"

namespace relax {

constexpr int64_t kCompressedPartElements = 1 << 19;

// Number of parts of every chunk when `count` elements are split over `size` ranks.
int compressed_parts(int64_t count, int size);

struct CompressedAllreduce {
  // The input: one buffer, or tensors laid end to end (`pieces`, each read where it lies; `input`
  // then null), multiplied by `prescale` before anything else (error feedback in those units).
  const float* input = nullptr;
  std::vector<Piece> pieces;
  float prescale = 1.0f;
  float* output = nullptr;          // may equal input
  int64_t count = 0;
  bool average = true;
  float* worker_error = nullptr;    // count floats, or nullptr: no error feedback
  float* owner_error = nullptr;     // this rank's chunk (even_counts(count, size)[rank]), or nullptr
};

// Runs one compressed all-reduce over `collectives`. Non-finite inputs on any rank fail the
// operation on every rank (with the first such rank named) instead of spreading garbage.
Status compressed_allreduce(Collectives& collectives, const Codec& codec, const CompressedAllreduce& op,
                            const std::vector<int>& world_ranks, std::vector<uint8_t>& scratch);

}  // namespace relax
