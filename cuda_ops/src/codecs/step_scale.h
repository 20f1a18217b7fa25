// The factored step scale's per-element work on host memory (relaxlib.algorithms.step_scale):
// the mean squares a rank sends, and the pass that turns the averaged, smoothed statistics into
// each element's scale, rescales the error-feedback residuals and divides the step. One pass
// each over the bucket, where composing framework ops took five to seven.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "util/types.h"

namespace relax {

// One parameter of a bucket viewed as `rows x cols`; rows == 1 means one scale for all its
// `cols` elements (a vector, or a shape that leaves a single row or column).
struct ScaleFactor {
  int64_t rows = 1;
  int64_t cols = 0;
};

// The (rows, cols) pairs `shapes` (2 * count int64) as factors; an error naming the first bad one.
Status scale_factors(const int64_t* shapes, int32_t count, std::vector<ScaleFactor>& factors);

// Elements the factors cover (rows * cols, or cols for rows == 1).
int64_t scale_elements(const std::vector<ScaleFactor>& factors);

// Statistic floats a parameter sends: rows', columns' and whole mean squares (rows == 1: one).
int64_t scale_statistics_count(const ScaleFactor& factor);

// Writes the statistics of `step` (the parameters of `factors` one after another) to `out`:
// per parameter its rows' mean squares, its columns', then the whole's (the mean of the rows'),
// or for rows == 1 only the whole's. Sums in float64, each result rounded once to float32.
void scale_statistics(const float* step, const ScaleFactor* factors, int32_t count, float* out);

// Statistic floats of all `factors`.
int64_t scale_statistics_count(const std::vector<ScaleFactor>& factors);

// Smooths the statistics averaged over the ranks into `smoothed`: decay * smoothed +
// (1 - decay) * averaged, both factors rounded to float32 and every operation in float32 (as
// relaxlib.algorithms.step_scale composes it); an element whose result is not finite keeps its
// previous value.
void smooth_statistics(float* smoothed, const float* averaged, int64_t count, double decay);

// The error-feedback residuals to keep in scaled units (null when the bucket has none): `worker`
// spans the bucket, `owner` the `owner_count` elements from `owner_offset`.
struct ScaleResiduals {
  float* worker = nullptr;
  float* owner = nullptr;
  int64_t owner_offset = 0;
  int64_t owner_count = 0;
};

// From the smoothed statistics (laid out as scale_statistics writes them) each element's scale
// v = sqrt(row / whole) * sqrt(col) + floor * sqrt(whole) (rows == 1: sqrt(whole) + the same
// floor; whole has 1e-30 added). scale_apply multiplies the residuals by old / new scale, the old
// one computed the same way from `previous` (the statistics the residuals were last scaled with),
// and writes step / new scale to `out` (may be `step`). Float32 operations in that order, so a
// framework composing the same ops gets the same bits; no per-element array of scales is kept.
void scale_apply(const float* previous, const float* smoothed, const ScaleFactor* factors, int32_t count, float floor,
                 const float* step, float* out, const ScaleResiduals& residuals);

// Multiplies each element of `data` by its scale from `smoothed` (as scale_apply sets it): the
// scaled average back in the step's own units.
void scale_multiply(const float* smoothed, const ScaleFactor* factors, int32_t count, float floor, float* data);

}  // namespace relax
