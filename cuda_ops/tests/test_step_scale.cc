// The factored step scale's host passes against its formula, element by element.
#include <cmath>
#include <vector>

#include "check.h"
#include "codecs/step_scale.h"

namespace {

// A 2 x 3 weight [[1, 2, 3], [4, 5, 6]] and a vector [3, 4], one bucket.
const std::vector<relax::ScaleFactor> kFactors = {{2, 3}, {1, 2}};
const std::vector<float> kStep = {1, 2, 3, 4, 5, 6, 3, 4};

}  // namespace

TEST(scale_statistics_are_the_mean_squares_of_rows_columns_and_whole) {
  std::vector<float> out(7);
  relax::scale_statistics(kStep.data(), kFactors.data(), 2, out.data());
  const std::vector<float> expected = {float(14.0 / 3), float(77.0 / 3), 8.5f, 14.5f, 22.5f, float(91.0 / 6), 12.5f};
  for (size_t i = 0; i < expected.size(); ++i) CHECK_EQ(out[i], expected[i]);
}

namespace {

// Element k's scale, by the formula, in a bucket of one rows x cols weight and then a vector,
// from statistics laid out as scale_statistics writes them (floor 0.1).
float formula_scale(const std::vector<float>& smoothed, int rows, int cols, int k) {
  if (k >= rows * cols) {
    const float vector_total = smoothed[rows + cols + 1] + 1e-30f;
    return std::sqrt(vector_total) + 0.1f * std::sqrt(vector_total);
  }
  const float total = smoothed[rows + cols] + 1e-30f;
  const float product = std::sqrt(smoothed[k / cols] / total) * std::sqrt(smoothed[rows + k % cols]);
  return product + 0.1f * std::sqrt(total);
}

float small_scale(const std::vector<float>& smoothed, int k) { return formula_scale(smoothed, 2, 3, k); }

}  // namespace

TEST(scale_apply_divides_by_the_factored_scale_and_rescales_the_owned_residuals_by_old_over_new) {
  std::vector<float> smoothed(7), previous(7);
  relax::scale_statistics(kStep.data(), kFactors.data(), 2, smoothed.data());
  const std::vector<float> earlier = {3, 1, 7, 2, 5, 9, 4, 6};  // another step (8 elements, as kStep)
  relax::scale_statistics(earlier.data(), kFactors.data(), 2, previous.data());
  std::vector<float> worker(8, 1.0f), owner(2, 1.0f), out(kStep);
  relax::scale_apply(previous.data(), smoothed.data(), kFactors.data(), 2, 0.1f, out.data(), out.data(),
                     relax::ScaleResiduals{worker.data(), owner.data(), 2, 2});  // owns elements 2 and 3
  for (int k = 0; k < 8; ++k) {
    const float v = small_scale(smoothed, k), change = small_scale(previous, k) / v;
    CHECK(change != 1.0f);
    CHECK_EQ(out[k], kStep[k] / v);
    CHECK_EQ(worker[k], change);
    if (k == 2 || k == 3) CHECK_EQ(owner[k - 2], change);
  }
}

TEST(scale_apply_leaves_the_residuals_alone_when_the_statistics_did_not_change) {
  std::vector<float> smoothed(7);
  relax::scale_statistics(kStep.data(), kFactors.data(), 2, smoothed.data());
  std::vector<float> worker(8, 0.3f), out(8);
  relax::scale_apply(smoothed.data(), smoothed.data(), kFactors.data(), 2, 0.1f, kStep.data(), out.data(),
                     relax::ScaleResiduals{worker.data(), nullptr, 0, 0});
  for (int k = 0; k < 8; ++k) CHECK_EQ(worker[k], 0.3f);
}

TEST(scale_multiply_multiplies_back_by_the_scale_apply_divided_by) {
  std::vector<float> smoothed(7);
  relax::scale_statistics(kStep.data(), kFactors.data(), 2, smoothed.data());
  std::vector<float> data(8, 1.5f);
  relax::scale_multiply(smoothed.data(), kFactors.data(), 2, 0.1f, data.data());
  for (int k = 0; k < 8; ++k) CHECK_EQ(data[k], 1.5f * small_scale(smoothed, k));
}

TEST(scale_apply_of_a_zero_step_stays_finite_with_a_floor) {
  const std::vector<float> zeros(8, 0.0f);
  std::vector<float> smoothed(7), out(8, 1.0f), worker(8, 1.0f);
  relax::scale_statistics(zeros.data(), kFactors.data(), 2, smoothed.data());
  relax::scale_apply(smoothed.data(), smoothed.data(), kFactors.data(), 2, 0.1f, zeros.data(), out.data(),
                     relax::ScaleResiduals{worker.data(), nullptr, 0, 0});
  for (int k = 0; k < 8; ++k) {
    CHECK(small_scale(smoothed, k) > 0.0f);
    CHECK_EQ(out[k], 0.0f);
    CHECK_EQ(worker[k], 1.0f);
  }
}

namespace {

// A 5 x 37 weight and a 19-element vector: rows longer than a vector of 8 floats with tails, so
// the vectorized loops and their tails both run.
const std::vector<relax::ScaleFactor> kWide = {{5, 37}, {1, 19}};
constexpr int kWideElements = 5 * 37 + 19;

std::vector<float> wide_step() {
  std::vector<float> step(kWideElements);
  for (int k = 0; k < kWideElements; ++k) step[k] = std::sin(0.37f * k + 0.1f) * std::exp(0.01f * (k % 53));
  return step;
}

}  // namespace

TEST(scale_statistics_of_wide_rows_and_vectors_add_squares_in_lanes_then_across) {
  const std::vector<float> step = wide_step();
  std::vector<float> out(5 + 37 + 1 + 1);
  relax::scale_statistics(step.data(), kWide.data(), 2, out.data());
  double rows_total = 0.0;
  for (int i = 0; i < 5; ++i) {
    double lane[4] = {0, 0, 0, 0};
    for (int j = 0; j < 37; ++j) {
      const double x = step[i * 37 + j];
      lane[j < 36 ? j % 4 : 0] += x * x;  // the tail goes to lane 0
    }
    const double mean = ((lane[0] + lane[1]) + (lane[2] + lane[3])) / 37.0;
    CHECK_EQ(out[i], static_cast<float>(mean));
    rows_total += mean;
  }
  for (int j = 0; j < 37; ++j) {
    double column = 0.0;
    for (int i = 0; i < 5; ++i) column += static_cast<double>(step[i * 37 + j]) * step[i * 37 + j];
    CHECK_EQ(out[5 + j], static_cast<float>(column / 5.0));
  }
  CHECK_EQ(out[42], static_cast<float>(rows_total / 5.0));
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // the vector: eight lanes, the tail into lane 0
  for (int j = 0; j < 19; ++j) {
    const double x = step[5 * 37 + j];
    lane[j < 16 ? j % 8 : 0] += x * x;
  }
  double vector_sum = 0.0;
  for (double partial : lane) vector_sum += partial;
  CHECK_EQ(out[43], static_cast<float>(vector_sum / 19.0));
}

namespace {

float wide_scale(const std::vector<float>& smoothed, int k) { return formula_scale(smoothed, 5, 37, k); }

}  // namespace

TEST(scale_apply_and_multiply_of_wide_rows_match_the_formula_with_the_owner_range_cutting_rows) {
  const std::vector<float> step = wide_step();
  std::vector<float> smoothed(44), previous(44), earlier(kWideElements);
  relax::scale_statistics(step.data(), kWide.data(), 2, smoothed.data());
  for (int k = 0; k < kWideElements; ++k) earlier[k] = std::cos(0.21f * k) + 0.5f;
  relax::scale_statistics(earlier.data(), kWide.data(), 2, previous.data());
  for (const int owner_offset : {0, 13, 50, 190}) {  // starts mid-row, mid-row, mid-row, mid-vector
    const int owner_count = owner_offset == 190 ? kWideElements - 190 : 61;
    std::vector<float> worker(kWideElements), owner(owner_count), out(kWideElements);
    for (int k = 0; k < kWideElements; ++k) worker[k] = 1.0f - 0.003f * k;
    for (int k = 0; k < owner_count; ++k) owner[k] = 2.0f + 0.02f * k;
    const std::vector<float> old_worker = worker, old_owner = owner;
    relax::scale_apply(previous.data(), smoothed.data(), kWide.data(), 2, 0.1f, step.data(), out.data(),
                       relax::ScaleResiduals{worker.data(), owner.data(), owner_offset, owner_count});
    for (int k = 0; k < kWideElements; ++k) {
      const float v = wide_scale(smoothed, k), change = wide_scale(previous, k) / v;
      CHECK_EQ(out[k], step[k] / v);
      CHECK_EQ(worker[k], old_worker[k] * change);
      if (k >= owner_offset && k < owner_offset + owner_count) {
        CHECK_EQ(owner[k - owner_offset], old_owner[k - owner_offset] * change);
      }
    }
  }
  std::vector<float> back = step;
  relax::scale_multiply(smoothed.data(), kWide.data(), 2, 0.1f, back.data());
  for (int k = 0; k < kWideElements; ++k) CHECK_EQ(back[k], step[k] * wide_scale(smoothed, k));
}

TEST(smoothing_weighs_past_and_present_and_keeps_what_is_not_finite) {
  std::vector<float> smoothed = {1.0f, 3.0f, 5.0f, 7.0f};
  const std::vector<float> averaged = {3.0f, NAN, INFINITY, 0.1f};
  relax::smooth_statistics(smoothed.data(), averaged.data(), 4, 0.5);
  CHECK_EQ(smoothed[0], 2.0f);
  CHECK_EQ(smoothed[1], 3.0f);  // a non-finite average leaves the past alone
  CHECK_EQ(smoothed[2], 5.0f);
  CHECK_EQ(smoothed[3], 0.5f * 7.0f + 0.5f * 0.1f);
  std::vector<float> weighted = {1.0f};
  relax::smooth_statistics(weighted.data(), averaged.data(), 1, 0.75);
  CHECK_EQ(weighted[0], 0.75f * 1.0f + 0.25f * 3.0f);
}

TEST(step_scale_factors_refuse_bad_shapes_and_count_their_elements) {
  std::vector<relax::ScaleFactor> factors;
  const int64_t good[] = {2, 3, 1, 5};
  CHECK(relax::scale_factors(good, 2, factors).is_ok());
  CHECK_EQ(relax::scale_elements(factors), int64_t{11});
  CHECK_EQ(relax::scale_statistics_count(factors), int64_t{7});
  const int64_t bad[] = {2, 3, 3, 0};
  const relax::Status status = relax::scale_factors(bad, 2, factors);
  CHECK(!status.is_ok());
  CHECK(status.message.find("parameter 1 has shape 3 x 0") != std::string::npos);
}
