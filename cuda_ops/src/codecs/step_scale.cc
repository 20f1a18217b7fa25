#include "codecs/step_scale.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace relax {

namespace {

// Added to the whole's mean square so that a step of zeros still gets a positive scale.
constexpr float kTinyMeanSquare = 1e-30f;

}  // namespace

int64_t scale_statistics_count(const ScaleFactor& factor) {
  return factor.rows == 1 ? 1 : factor.rows + factor.cols + 1;
}

void scale_statistics(const float* step, const ScaleFactor* factors, int32_t count, float* out) {
  std::vector<double> columns;
  for (int32_t p = 0; p < count; ++p) {
    const ScaleFactor& f = factors[p];
    if (f.rows == 1) {
      double sum = 0.0;
      for (int64_t j = 0; j < f.cols; ++j) sum += static_cast<double>(step[j]) * step[j];
      *out++ = f.cols ? static_cast<float>(sum / static_cast<double>(f.cols)) : 0.0f;
      step += f.cols;
      continue;
    }
    columns.assign(static_cast<size_t>(f.cols), 0.0);
    double rows_total = 0.0;
    for (int64_t i = 0; i < f.rows; ++i, step += f.cols) {
      // four partial sums, unrolled: one chain of dependent additions took three times as long
      double* column = columns.data();
      double lane[4] = {0.0, 0.0, 0.0, 0.0};
      int64_t j = 0;
      for (; j + 4 <= f.cols; j += 4) {
        for (int l = 0; l < 4; ++l) {
          const double square = static_cast<double>(step[j + l]) * step[j + l];  // exact: 48 of 53 bits
          lane[l] += square;
          column[j + l] += square;
        }
      }
      for (; j < f.cols; ++j) {
        const double square = static_cast<double>(step[j]) * step[j];
        lane[0] += square;
        column[j] += square;
      }
      const double row = (lane[0] + lane[1]) + (lane[2] + lane[3]);
      const double mean = row / static_cast<double>(f.cols);
      out[i] = static_cast<float>(mean);
      rows_total += mean;
    }
    for (int64_t j = 0; j < f.cols; ++j)
      out[f.rows + j] = static_cast<float>(columns[static_cast<size_t>(j)] / static_cast<double>(f.rows));
    out[f.rows + f.cols] = static_cast<float>(rows_total / static_cast<double>(f.rows));
    out += scale_statistics_count(f);
  }
}

namespace {

// Elements [begin, begin + n) of the bucket get the scales `v`: the residuals follow old / new
// scale, the step is divided, the new scale replaces the old. Short loops over one row (in L1)
// that the compiler vectorizes (the pass is bound by memory: AVX clones measured no faster).
void apply_run(int64_t begin, int64_t n, const float* v, float* change, float* value, const float* step,
               float* out, const ScaleResiduals& residuals) {
  for (int64_t j = 0; j < n; ++j) change[j] = value[begin + j] / v[j];
  if (residuals.worker) {
    float* worker = residuals.worker + begin;
    for (int64_t j = 0; j < n; ++j) worker[j] *= change[j];
  }
  const int64_t first = std::max(begin, residuals.owner_offset);
  const int64_t last = std::min(begin + n, residuals.owner_offset + residuals.owner_count);
  if (residuals.owner) {
    for (int64_t k = first; k < last; ++k) residuals.owner[k - residuals.owner_offset] *= change[k - begin];
  }
  for (int64_t j = 0; j < n; ++j) out[begin + j] = step[begin + j] / v[j];
  for (int64_t j = 0; j < n; ++j) value[begin + j] = v[j];
}

}  // namespace

void scale_apply(const float* smoothed, const ScaleFactor* factors, int32_t count, float floor, float* value,
                 const float* step, float* out, const ScaleResiduals& residuals) {
  constexpr int64_t kRun = 1024;  // a vector's elements are applied this many at a time
  std::vector<float> row_factor, col_factor, run, change;
  int64_t begin = 0;  // the parameter's first element within the bucket
  for (int32_t p = 0; p < count; ++p) {
    const ScaleFactor& f = factors[p];
    const int64_t stats = scale_statistics_count(f);
    const float total = smoothed[stats - 1] + kTinyMeanSquare;
    const float root_total = std::sqrt(total);
    const float offset = floor * root_total;
    if (f.rows == 1) {
      run.assign(static_cast<size_t>(std::min(f.cols, kRun)), root_total + offset);
      change.resize(run.size());
      for (int64_t j = 0; j < f.cols; j += kRun) {
        const int64_t n = std::min(kRun, f.cols - j);
        apply_run(begin + j, n, run.data(), change.data(), value, step, out, residuals);
      }
    } else {
      row_factor.resize(static_cast<size_t>(f.rows));
      col_factor.resize(static_cast<size_t>(f.cols));
      run.resize(static_cast<size_t>(f.cols));
      change.resize(static_cast<size_t>(f.cols));
      for (int64_t i = 0; i < f.rows; ++i) row_factor[static_cast<size_t>(i)] = std::sqrt(smoothed[i] / total);
      for (int64_t j = 0; j < f.cols; ++j) col_factor[static_cast<size_t>(j)] = std::sqrt(smoothed[f.rows + j]);
      for (int64_t i = 0; i < f.rows; ++i) {
        const float r = row_factor[static_cast<size_t>(i)];
        // a multiply, then an add, each rounded (no fused multiply-add): as the frameworks do
        for (int64_t j = 0; j < f.cols; ++j) {
          const float product = r * col_factor[static_cast<size_t>(j)];
          run[static_cast<size_t>(j)] = product + offset;
        }
        apply_run(begin + i * f.cols, f.cols, run.data(), change.data(), value, step, out, residuals);
      }
    }
    begin += f.rows == 1 ? f.cols : f.rows * f.cols;
    smoothed += stats;
  }
}

}  // namespace relax
