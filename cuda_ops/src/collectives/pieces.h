// Tensors laid end to end as one buffer that is never built: a fused collective reads each tensor
// and writes its result where it lies instead of copying them into a fusion buffer and back.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace relax {

// One tensor of a collective over several: `bytes` read from `in`, its result written to `out`
// (`in` itself, or memory no other piece reads or writes; null where no result is wanted).
struct Piece {
  const void* in = nullptr;
  void* out = nullptr;
  int64_t bytes = 0;
};

// The concatenation of pieces, addressed by byte offset.
class Pieces {
 public:
  explicit Pieces(std::vector<Piece> pieces) : pieces_(std::move(pieces)) {
    starts_.reserve(pieces_.size());
    for (const Piece& piece : pieces_) {
      starts_.push_back(bytes_);
      bytes_ += piece.bytes;
    }
  }

  int64_t bytes() const { return bytes_; }
  size_t size() const { return pieces_.size(); }
  const Piece& operator[](size_t i) const { return pieces_[i]; }

  // Calls part(in, out, n, done) for each piece's share of bytes [begin, begin + bytes) of the
  // concatenation, in order: `n` bytes at `in` and `out` (null where the piece's out is), `done`
  // the bytes of the range before this share.
  template <typename Part>
  void each_part(int64_t begin, int64_t bytes, Part&& part) const {
    if (bytes <= 0) return;
    size_t i = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), begin) - starts_.begin()) - 1;
    for (int64_t done = 0; done < bytes; ++i) {
      const Piece& piece = pieces_[i];
      const int64_t at = begin + done - starts_[i];
      const int64_t n = std::min(piece.bytes - at, bytes - done);
      if (n <= 0) continue;  // an empty piece
      part(static_cast<const uint8_t*>(piece.in) + at, piece.out ? static_cast<uint8_t*>(piece.out) + at : nullptr,
           n, done);
      done += n;
    }
  }

 private:
  std::vector<Piece> pieces_;
  std::vector<int64_t> starts_;  // byte offset of each piece in the concatenation
  int64_t bytes_ = 0;
};

// `inputs` (only their `in` and `bytes` count) with bytes [begin, begin + bytes) of their
// concatenation routed to `out`, consecutively, and the other bytes to `elsewhere` at their own
// offset in the concatenation (null: not written): pieces are split where the range starts and
// ends. What a reduce-scatter reduces over, with this rank's block going to its output.
inline std::vector<Piece> route_range(const std::vector<Piece>& inputs, int64_t begin, int64_t bytes, void* out,
                                      void* elsewhere = nullptr) {
  std::vector<Piece> routed;
  routed.reserve(inputs.size() + 2);
  const int64_t end = begin + bytes;
  int64_t at = 0;  // offset of the current input in the concatenation
  for (const Piece& input : inputs) {
    const auto* in = static_cast<const uint8_t*>(input.in);
    const int64_t lo = std::clamp(begin - at, int64_t{0}, input.bytes);  // the range within this input
    const int64_t hi = std::clamp(end - at, int64_t{0}, input.bytes);
    const auto other = [&](int64_t offset) {
      return elsewhere ? static_cast<uint8_t*>(elsewhere) + at + offset : nullptr;
    };
    if (lo > 0) routed.push_back({in, other(0), lo});
    if (hi > lo) routed.push_back({in + lo, static_cast<uint8_t*>(out) + (at + lo - begin), hi - lo});
    if (input.bytes > hi) routed.push_back({in + hi, other(hi), input.bytes - hi});
    at += input.bytes;
  }
  return routed;
}

}  // namespace relax
