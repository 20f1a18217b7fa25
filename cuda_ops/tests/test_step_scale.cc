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

TEST(scale_apply_divides_by_the_factored_scale_and_rescales_the_owned_residuals) {
  std::vector<float> smoothed(7);
  relax::scale_statistics(kStep.data(), kFactors.data(), 2, smoothed.data());
  std::vector<float> value(8, 2.0f), worker(8, 1.0f), owner(2, 1.0f), out(kStep);
  relax::scale_apply(smoothed.data(), kFactors.data(), 2, 0.1f, value.data(), out.data(), out.data(),
                     relax::ScaleResiduals{worker.data(), owner.data(), 2, 2});  // owns elements 2 and 3
  const float total = smoothed[5] + 1e-30f, floor = 0.1f * std::sqrt(total);
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 3; ++j) {
      const float product = std::sqrt(smoothed[i] / total) * std::sqrt(smoothed[2 + j]);
      const float v = product + floor;
      const int k = i * 3 + j;
      CHECK_EQ(value[k], v);
      CHECK_EQ(out[k], kStep[k] / v);
      CHECK_EQ(worker[k], 2.0f / v);
      if (k == 2 || k == 3) CHECK_EQ(owner[k - 2], 2.0f / v);
    }
  }
  const float vector_total = smoothed[6] + 1e-30f, v = std::sqrt(vector_total) + 0.1f * std::sqrt(vector_total);
  for (int k = 6; k < 8; ++k) {
    CHECK_EQ(value[k], v);
    CHECK_EQ(out[k], kStep[k] / v);
    CHECK_EQ(worker[k], 2.0f / v);
  }
}

TEST(scale_apply_of_a_zero_step_stays_finite_with_a_floor) {
  const std::vector<float> zeros(8, 0.0f);
  std::vector<float> smoothed(7), value(8, 0.0f), out(8, 1.0f);
  relax::scale_statistics(zeros.data(), kFactors.data(), 2, smoothed.data());
  relax::scale_apply(smoothed.data(), kFactors.data(), 2, 0.1f, value.data(), zeros.data(), out.data(),
                     relax::ScaleResiduals{});
  for (int k = 0; k < 8; ++k) {
    CHECK(value[k] > 0.0f);
    CHECK_EQ(out[k], 0.0f);
  }
}
