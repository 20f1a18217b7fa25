// Codec round trips: exact where values are representable, within the documented bounds
// otherwise, and sane for empty and one-element chunks.
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "check.h"
#include "codecs/codec.h"
#include "codecs/codec_math.h"
#include "collectives/compressed.h"
#include "util/flush_denormals.h"
#include "util/half.h"

using relax::Codec;
using relax::make_codec;

namespace {

// A codec by name, as users name it (ids are the registry's business).
std::unique_ptr<Codec> codec_named(const char* name) { return make_codec(relax::codec_id(name)); }

}  // namespace

namespace {

std::vector<float> round_trip(const Codec& codec, const std::vector<float>& in) {
  std::vector<uint8_t> bytes(static_cast<size_t>(codec.encoded_bytes(static_cast<int64_t>(in.size()))));
  codec.encode(in.data(), static_cast<int64_t>(in.size()), bytes.data());
  std::vector<float> out(in.size(), -123.0f);
  codec.decode(bytes.data(), static_cast<int64_t>(in.size()), out.data());
  return out;
}

std::vector<float> random_values(size_t n, unsigned seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

}  // namespace

TEST(encoded_sizes_match_the_formats) {
  CHECK_EQ(codec_named("fp16")->encoded_bytes(10), int64_t{20});
  CHECK_EQ(codec_named("uint8")->encoded_bytes(10), int64_t{18});
  CHECK_EQ(codec_named("sign")->encoded_bytes(10), int64_t{6});
  CHECK_EQ(codec_named("sign")->encoded_bytes(16), int64_t{6});
  CHECK_EQ(codec_named("sign")->encoded_bytes(0), int64_t{4});
  CHECK(make_codec(99) == nullptr);
}

TEST(the_registry_lists_each_codec_once_by_id_and_finds_it_by_name) {
  const std::vector<relax::CodecInfo> codecs = relax::registered_codecs();
  CHECK(codecs.size() >= 3u);
  for (size_t i = 0; i < codecs.size(); ++i) {
    if (i > 0) CHECK(codecs[i - 1].id < codecs[i].id);
    CHECK_EQ(relax::codec_id(codecs[i].name), codecs[i].id);
    CHECK_EQ(relax::codec_name(codecs[i].id), std::string(codecs[i].name));
    CHECK_EQ(std::string(make_codec(codecs[i].id)->name()), std::string(codecs[i].name));
    CHECK(codecs[i].consensus_step > 0 && codecs[i].consensus_step <= 1);
  }
  CHECK_EQ(relax::codec_id("no-such-codec"), -1);
  CHECK_EQ(relax::codec_name(99), std::string("codec(99)"));
}

TEST(fp16_is_exact_on_halves_and_within_half_an_ulp_elsewhere) {
  auto codec = codec_named("fp16");
  std::vector<float> halves = {0.0f, -2.5f, 1024.0f, 0.0009765625f, 65504.0f};
  CHECK(round_trip(*codec, halves) == halves);
  const auto values = random_values(1000, 1, -100, 100);
  const auto out = round_trip(*codec, values);
  int worse = 0;
  for (size_t i = 0; i < values.size(); ++i) worse += std::fabs(out[i] - values[i]) > std::fabs(values[i]) * 0x1p-11f;
  CHECK_EQ(worse, 0);
}

TEST(uint8_error_is_at_most_half_a_step_and_grid_values_are_exact) {
  auto codec = codec_named("uint8");
  const auto values = random_values(4099, 2, -3, 7);
  float lo = values[0], hi = values[0];
  for (float v : values) lo = std::fmin(lo, v), hi = std::fmax(hi, v);
  const float bound = (hi - lo) / 255.0f / 2.0f * 1.0001f;
  const auto out = round_trip(*codec, values);
  int worse = 0;
  for (size_t i = 0; i < values.size(); ++i) worse += std::fabs(out[i] - values[i]) > bound;
  CHECK_EQ(worse, 0);
  std::vector<float> grid;
  for (int k = 0; k <= 255; ++k) grid.push_back(static_cast<float>(k));
  CHECK(round_trip(*codec, grid) == grid);
  std::vector<float> constant(33, -4.25f);
  CHECK(round_trip(*codec, constant) == constant);
}

TEST(sign_keeps_signs_and_the_l2_norm) {
  auto codec = codec_named("sign");
  const auto values = random_values(1001, 3, -1, 1);
  const auto out = round_trip(*codec, values);
  double l2_in = 0, l2_out = 0;
  int wrong_sign = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    l2_in += static_cast<double>(values[i]) * values[i];
    l2_out += static_cast<double>(out[i]) * out[i];
    wrong_sign += (values[i] >= 0) != (out[i] >= 0);
  }
  CHECK_EQ(wrong_sign, 0);
  CHECK(std::fabs(std::sqrt(l2_in) - std::sqrt(l2_out)) < 1e-4 * std::sqrt(l2_in));
  std::vector<float> equal_magnitudes = {0.5f, -0.5f, 0.5f, 0.5f, -0.5f};
  CHECK(round_trip(*codec, equal_magnitudes) == equal_magnitudes);
}

TEST(empty_and_single_element_chunks) {
  for (const relax::CodecInfo& info : relax::registered_codecs()) {
    auto codec = info.make();
    CHECK(round_trip(*codec, {}).empty());
    CHECK(round_trip(*codec, {-3.0f}) == std::vector<float>{-3.0f});
  }
}

TEST(decode_add_accumulates_the_decoded_values) {
  for (const relax::CodecInfo& info : relax::registered_codecs()) {
    auto codec = info.make();
    const auto values = random_values(77, 4, -2, 2);
    std::vector<uint8_t> bytes(static_cast<size_t>(codec->encoded_bytes(77)));
    codec->encode(values.data(), 77, bytes.data());
    std::vector<float> decoded(77), acc(77, 1.0f);
    codec->decode(bytes.data(), 77, decoded.data());
    codec->decode_add(bytes.data(), 77, acc.data());
    int wrong = 0;
    for (size_t i = 0; i < 77; ++i) wrong += acc[i] != 1.0f + decoded[i];
    CHECK_EQ(wrong, 0);
  }
}

TEST(residual_is_input_minus_decoded_also_in_place) {
  for (const relax::CodecInfo& info : relax::registered_codecs()) {
    auto codec = info.make();
    const auto values = random_values(1003, 5, -2, 2);
    std::vector<uint8_t> bytes(static_cast<size_t>(codec->encoded_bytes(1003)));
    codec->encode(values.data(), 1003, bytes.data());
    std::vector<float> decoded(1003), residual(1003);
    codec->decode(bytes.data(), 1003, decoded.data());
    codec->residual(bytes.data(), 1003, values.data(), residual.data());
    std::vector<float> in_place = values;  // out may be v itself
    codec->residual(bytes.data(), 1003, in_place.data(), in_place.data());
    int wrong = 0;
    for (size_t i = 0; i < 1003; ++i) wrong += residual[i] != values[i] - decoded[i] || in_place[i] != residual[i];
    CHECK_EQ(wrong, 0);
  }
}

// Parts of a compressed all-reduce's chunks: one until the largest chunk exceeds a part, then
// as many as it takes; the same for every chunk, so every rank agrees on the wire layout.
TEST(compressed_parts_follow_the_largest_chunk) {
  const int64_t part = relax::kCompressedPartElements;
  CHECK_EQ(relax::compressed_parts(0, 4), 1);
  CHECK_EQ(relax::compressed_parts(1, 4), 1);
  CHECK_EQ(relax::compressed_parts(4 * part, 4), 1);
  CHECK_EQ(relax::compressed_parts(4 * part + 1, 4), 2);  // chunk 0 takes the extra element
  CHECK_EQ(relax::compressed_parts(3 * 16 * part, 3), 16);
  CHECK_EQ(relax::compressed_parts(16 * part + 1, 1), 17);
}

// The vector paths give the scalar formula's bits: the scale from 8 double lanes of squares
// (lane j: elements j, j + 8, ...; the tail in lane 0) added in lane order, decoded values
// +-scale, sums and residuals element by element; for lengths with and without a tail.
TEST(sign_gives_the_scalar_formulas_bits_on_every_length) {
  auto codec = codec_named("sign");
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{8}, int64_t{1003}, int64_t{4096}, int64_t{65541}}) {
    const auto values = random_values(static_cast<size_t>(n), 6, -3, 2);
    double lanes[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < n; ++i) lanes[i < n / 8 * 8 ? i % 8 : 0] += static_cast<double>(values[i]) * values[i];
    double squares = 0;
    for (double lane : lanes) squares += lane;
    const float scale = static_cast<float>(std::sqrt(squares / static_cast<double>(n)));
    std::vector<uint8_t> bytes(static_cast<size_t>(codec->encoded_bytes(n)));
    codec->encode(values.data(), n, bytes.data());
    std::vector<float> decoded(static_cast<size_t>(n)), acc(static_cast<size_t>(n), 0.25f),
        residual(static_cast<size_t>(n));
    codec->decode(bytes.data(), n, decoded.data());
    codec->decode_add(bytes.data(), n, acc.data());
    codec->residual(bytes.data(), n, values.data(), residual.data());
    int wrong = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      const float q = values[i] >= 0 ? scale : -scale;
      wrong += decoded[i] != q || acc[i] != 0.25f + q || residual[i] != values[i] - q;
    }
    CHECK_EQ(wrong, 0);
  }
}

TEST(flush_denormals_reads_and_writes_subnormals_as_zero_only_within_its_scope) {
  volatile float smallest_normal = 1.17549435e-38f, half = 0.5f;
  const float before = smallest_normal * half;
  CHECK(before > 0.0f);
  {
    const relax::FlushDenormals flush;
    CHECK(smallest_normal * half == 0.0f);  // a subnormal result is written as zero
    volatile float subnormal = before;
    CHECK(subnormal + 0.0f == 0.0f);  // and a subnormal input read as zero
  }
  CHECK(smallest_normal * half == before);
}

TEST(uint8_gives_the_scalar_formulas_bits_on_every_length) {
  auto codec = codec_named("uint8");
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{31}, int64_t{32}, int64_t{33}, int64_t{1003}, int64_t{65541}})
  for (const bool zero_minimum : {false, true}) {
    // with zero_minimum, +0 and -0 in turn in one lane: which one is the minimum is up to the comparisons
    auto values = random_values(static_cast<size_t>(n), 7, zero_minimum ? 1 : -3, 2);
    for (size_t i = 3; zero_minimum && i < values.size(); i += 8) values[i] = (i / 8) % 2 ? -0.0f : 0.0f;
    float lows[8], highs[8];
    for (int j = 0; j < 8; ++j) lows[j] = highs[j] = values[0];
    for (int64_t i = 0; i < n; ++i) {
      const int lane = i < n / 8 * 8 ? static_cast<int>(i % 8) : 0;
      lows[lane] = values[i] < lows[lane] ? values[i] : lows[lane];
      highs[lane] = values[i] > highs[lane] ? values[i] : highs[lane];
    }
    float lo = lows[0], hi = highs[0];
    for (int j = 1; j < 8; ++j) {
      lo = lows[j] < lo ? lows[j] : lo;
      hi = highs[j] > hi ? highs[j] : hi;
    }
    const float step = relax::codec_math::minmax_step(lo, hi);
    const float inverse = step > 0.0f ? 1.0f / step : 0.0f;
    std::vector<uint8_t> bytes(static_cast<size_t>(codec->encoded_bytes(n))), fused(bytes.size());
    codec->encode(values.data(), n, bytes.data());
    std::vector<float> residual(static_cast<size_t>(n));
    codec->encode_with_residual(values.data(), n, fused.data(), residual.data());
    CHECK(fused == bytes);
    int wrong = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      const uint8_t q = relax::codec_math::minmax_quantize(values[i], lo, inverse);
      const float expected_residual = values[i] - relax::codec_math::minmax_dequantize(q, lo, step);
      wrong += bytes[8 + i] != q || std::memcmp(&residual[i], &expected_residual, 4) != 0;
    }
    CHECK_EQ(wrong, 0);
    CHECK(std::memcmp(bytes.data(), &lo, 4) == 0 && std::memcmp(bytes.data() + 4, &hi, 4) == 0);
  }
}

TEST(encode_with_residual_is_encode_then_residual_for_every_codec_also_in_place) {
  for (const char* name : {"fp16", "uint8", "sign"}) {
    auto codec = codec_named(name);
    const int64_t n = 1031;
    const auto values = random_values(static_cast<size_t>(n), 8, -2, 5);
    std::vector<uint8_t> separate(static_cast<size_t>(codec->encoded_bytes(n))), fused(separate.size());
    std::vector<float> expected(static_cast<size_t>(n)), in_place = values;
    codec->encode(values.data(), n, separate.data());
    codec->residual(separate.data(), n, values.data(), expected.data());
    codec->encode_with_residual(in_place.data(), n, fused.data(), in_place.data());
    CHECK(fused == separate);
    CHECK(std::memcmp(in_place.data(), expected.data(), static_cast<size_t>(n) * 4) == 0);
  }
}
