// Pieces: tensors laid end to end, addressed by byte offset as one buffer.
#include <cstdint>
#include <vector>

#include "check.h"
#include "collectives/pieces.h"

using relax::Piece;
using relax::Pieces;

namespace {

// One call of each_part's callback, as offsets into the test's input and output arrays.
struct Share {
  int64_t in_at, out_at, bytes, done;
};

}  // namespace

// A range split at piece boundaries, skipping empty pieces, with null results where a piece
// has none, and `done` counting what came before each share.
TEST(pieces_split_a_range_at_their_boundaries) {
  std::vector<uint8_t> in(100), out(100);
  const Pieces pieces({Piece{in.data(), out.data(), 10}, Piece{in.data() + 10, nullptr, 0},
                       Piece{in.data() + 50, out.data() + 50, 30}, Piece{in.data() + 20, nullptr, 5}});
  CHECK_EQ(pieces.bytes(), 45);
  CHECK_EQ(pieces.size(), size_t{4});
  std::vector<Share> shares;
  bool null_out_seen = false;
  const auto record = [&](const uint8_t* i, uint8_t* o, int64_t n, int64_t done) {
    if (o == nullptr) null_out_seen = true;
    shares.push_back({i - in.data(), o ? o - out.data() : -1, n, done});
  };
  pieces.each_part(4, 38, record);  // 6 bytes of the first piece, all of the third, 2 of the last
  CHECK_EQ(shares.size(), size_t{3});
  CHECK(shares[0].in_at == 4 && shares[0].out_at == 4 && shares[0].bytes == 6 && shares[0].done == 0);
  CHECK(shares[1].in_at == 50 && shares[1].out_at == 50 && shares[1].bytes == 30 && shares[1].done == 6);
  CHECK(shares[2].in_at == 20 && shares[2].out_at == -1 && shares[2].bytes == 2 && shares[2].done == 36);
  CHECK(null_out_seen);

  shares.clear();
  pieces.each_part(10, 5, record);  // starts where an empty piece sits: served by the next one
  CHECK_EQ(shares.size(), size_t{1});
  CHECK(shares[0].in_at == 50 && shares[0].bytes == 5 && shares[0].done == 0);

  shares.clear();
  pieces.each_part(20, 0, record);  // nothing to do
  CHECK(shares.empty());
}

// route_range: the inputs cut where the routed range starts and ends, the range's bytes written
// consecutively to `out` and nothing else written; the concatenation read is unchanged.
TEST(route_range_writes_only_the_range_to_out) {
  std::vector<uint8_t> a(10), b(0), c(20);
  std::vector<uint8_t> out(12);
  const std::vector<Piece> inputs{Piece{a.data(), nullptr, 10}, Piece{b.data(), nullptr, 0},
                                  Piece{c.data(), nullptr, 20}};
  // bytes [6, 18): the last 4 of a, then the first 8 of c
  const std::vector<Piece> routed = relax::route_range(inputs, 6, 12, out.data());
  CHECK_EQ(routed.size(), size_t{4});
  CHECK(routed[0].in == a.data() && routed[0].out == nullptr && routed[0].bytes == 6);
  CHECK(routed[1].in == a.data() + 6 && routed[1].out == out.data() && routed[1].bytes == 4);
  CHECK(routed[2].in == c.data() && routed[2].out == out.data() + 4 && routed[2].bytes == 8);
  CHECK(routed[3].in == c.data() + 8 && routed[3].out == nullptr && routed[3].bytes == 12);
  CHECK_EQ(Pieces(routed).bytes(), 30);

  // the whole concatenation, and an empty range at its end
  const std::vector<Piece> all = relax::route_range(inputs, 0, 30, out.data());
  CHECK_EQ(all.size(), size_t{2});
  CHECK(all[0].out == out.data() && all[1].out == out.data() + 10 && all[1].bytes == 20);
  // the rest to `elsewhere`, each byte at its offset in the concatenation
  std::vector<uint8_t> rest(30);
  const std::vector<Piece> split = relax::route_range(inputs, 6, 12, out.data(), rest.data());
  CHECK_EQ(split.size(), size_t{4});
  CHECK(split[0].out == rest.data() && split[1].out == out.data() && split[2].out == out.data() + 4);
  CHECK(split[3].in == c.data() + 8 && split[3].out == rest.data() + 18 && split[3].bytes == 12);
  const std::vector<Piece> none = relax::route_range(inputs, 30, 0, out.data());
  CHECK_EQ(none.size(), size_t{2});
  CHECK(none[0].out == nullptr && none[1].out == nullptr && Pieces(none).bytes() == 30);
}
