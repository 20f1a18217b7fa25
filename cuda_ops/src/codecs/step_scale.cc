#include "codecs/step_scale.h"

#include <algorithm>
#include <cmath>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "codecs/codec_math.h"
#include "util/cpu.h"

namespace relax {

namespace {

// Added to the whole's mean square so that a step of zeros still gets a positive scale.
constexpr float kTinyMeanSquare = 1e-30f;

// Adds the squares of one row's `cols` floats to `column` and to the four partial sums `lane`
// (lane l: elements l, l + 4, ...); returns how many elements it took (a multiple of four).
int64_t row_squares_portable(const float* step, int64_t cols, double* column, double* lane) {
  int64_t j = 0;
  for (; j + 4 <= cols; j += 4) {
    for (int l = 0; l < 4; ++l) {
      const double square = static_cast<double>(step[j + l]) * step[j + l];  // exact: 48 of 53 bits
      lane[l] += square;
      column[j + l] += square;
    }
  }
  return j;
}

#if defined(__x86_64__)
// The same four lanes in one vector: the same additions in the same order, so the same bits
// (twice as fast as the compiler's SSE2 code for the loop above).
__attribute__((target("avx"))) int64_t row_squares_avx(const float* step, int64_t cols, double* column,
                                                       double* lane) {
  __m256d lanes = _mm256_loadu_pd(lane);
  int64_t j = 0;
  for (; j + 4 <= cols; j += 4) {
    const __m256d x = _mm256_cvtps_pd(_mm_loadu_ps(step + j));
    const __m256d square = _mm256_mul_pd(x, x);
    lanes = _mm256_add_pd(lanes, square);
    _mm256_storeu_pd(column + j, _mm256_add_pd(_mm256_loadu_pd(column + j), square));
  }
  _mm256_storeu_pd(lane, lanes);
  return j;
}
#endif

// The sum of squares of a vector's n floats in eight lanes, as the sign codec sums them (the
// tail into lane 0, codec_math::lanes_total): one chain of dependent additions took
// 0.35 ms per million elements, a latency-bound loop where the lanes are bound by memory.
double sum_of_squares_portable(const float* x, int64_t n) {
  double lane[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    for (int l = 0; l < 8; ++l) lane[l] += static_cast<double>(x[j + l]) * x[j + l];
  }
  for (; j < n; ++j) lane[0] += static_cast<double>(x[j]) * x[j];
  return codec_math::lanes_total(lane);
}

#if defined(__x86_64__)
// The same eight lanes in two vectors (lanes 0-3 and 4-7): the same additions, so the same bits.
__attribute__((target("avx"))) double sum_of_squares_avx(const float* x, int64_t n) {
  __m256d low = _mm256_setzero_pd(), high = _mm256_setzero_pd();
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256d a = _mm256_cvtps_pd(_mm_loadu_ps(x + j)), b = _mm256_cvtps_pd(_mm_loadu_ps(x + j + 4));
    low = _mm256_add_pd(low, _mm256_mul_pd(a, a));
    high = _mm256_add_pd(high, _mm256_mul_pd(b, b));
  }
  double lane[8];
  _mm256_storeu_pd(lane, low);
  _mm256_storeu_pd(lane + 4, high);
  for (; j < n; ++j) lane[0] += static_cast<double>(x[j]) * x[j];
  return codec_math::lanes_total(lane);
}
#endif

double sum_of_squares(const float* x, int64_t n) {
#if defined(__x86_64__)
  if (cpu_has_avx()) return sum_of_squares_avx(x, n);
#endif
  return sum_of_squares_portable(x, n);
}

int64_t row_squares(const float* step, int64_t cols, double* column, double* lane) {
#if defined(__x86_64__)
  if (cpu_has_avx()) return row_squares_avx(step, cols, column, lane);
#endif
  return row_squares_portable(step, cols, column, lane);
}

}  // namespace

Status scale_factors(const int64_t* shapes, int32_t count, std::vector<ScaleFactor>& factors) {
  if (count < 0 || (count > 0 && !shapes))
    return Status::error(RELAX_ERR_INVALID_ARGUMENT, "step scale: no shapes for " + std::to_string(count) + " parameters");
  factors.resize(static_cast<size_t>(count));
  // Element and statistics counts of the bucket must fit int64, so that scale_elements and
  // scale_statistics_count (and the sizes computed from them) cannot overflow.
  int64_t elements = 0, statistics = 0;
  for (int32_t p = 0; p < count; ++p) {
    const int64_t rows = shapes[2 * p], cols = shapes[2 * p + 1];
    const std::string shape = std::to_string(rows) + " x " + std::to_string(cols);
    if (rows < 1 || cols < 0 || (rows > 1 && cols < 1)) {
      return Status::error(RELAX_ERR_INVALID_ARGUMENT, "step scale: parameter " + std::to_string(p) + " has shape " + shape);
    }
    int64_t size = 0, stats = 1;  // statistics: 1 for a vector, else rows + cols + 1
    if (__builtin_mul_overflow(rows, cols, &size) || __builtin_add_overflow(elements, size, &elements) ||
        (rows > 1 && (__builtin_add_overflow(rows, cols, &stats) || __builtin_add_overflow(stats, 1, &stats))) ||
        __builtin_add_overflow(statistics, stats, &statistics)) {
      return Status::error(RELAX_ERR_INVALID_ARGUMENT, "step scale: parameter " + std::to_string(p) + " (" + shape +
                                                           ") takes the bucket past 2^63 elements");
    }
    factors[static_cast<size_t>(p)] = ScaleFactor{rows, cols};
  }
  return Status::ok();
}

int64_t scale_elements(const std::vector<ScaleFactor>& factors) {
  int64_t total = 0;
  for (const ScaleFactor& f : factors) total += f.rows * f.cols;
  return total;
}

int64_t scale_statistics_count(const ScaleFactor& factor) {
  return factor.rows == 1 ? 1 : factor.rows + factor.cols + 1;
}

int64_t scale_statistics_count(const std::vector<ScaleFactor>& factors) {
  int64_t total = 0;
  for (const ScaleFactor& f : factors) total += scale_statistics_count(f);
  return total;
}

void smooth_statistics(float* smoothed, const float* averaged, int64_t count, double decay) {
  const float keep = static_cast<float>(decay), take = static_cast<float>(1.0 - decay);
  for (int64_t i = 0; i < count; ++i) {
    // two products, each rounded, then their sum: no fused multiply-add (ISO C++ mode does not
    // contract, and this file is built without FMA), so the framework ops get the same bits
    const float next = keep * smoothed[i] + take * averaged[i];
    if (std::isfinite(next)) smoothed[i] = next;
  }
}

void scale_statistics(const float* step, const ScaleFactor* factors, int32_t count, float* out) {
  std::vector<double> columns;
  for (int32_t p = 0; p < count; ++p) {
    const ScaleFactor& f = factors[p];
    if (f.rows == 1) {
      const double sum = sum_of_squares(step, f.cols);
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
      int64_t j = row_squares(step, f.cols, column, lane);
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

// One run of a bucket's elements and their scales: element j of the run gets
// v_j = row * column[j] + offset (a multiply, then an add, each rounded: no fused multiply-add,
// as the frameworks compute it), or v_j = offset for every j when `column` is null.
struct ScaleRun {
  const float* column = nullptr;
  float row = 0.0f;
  float offset = 0.0f;

  float at(int64_t j) const { return column ? row * column[j] + offset : offset; }
  // The same run from its element `by` on.
  ScaleRun advanced(int64_t by) const { return ScaleRun{column ? column + by : nullptr, row, offset}; }
};

#if defined(__x86_64__)
__attribute__((target("avx"))) inline __m256 scales_avx(const ScaleRun& run, int64_t j) {
  const __m256 offset = _mm256_set1_ps(run.offset);
  if (!run.column) return offset;
  return _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(run.row), _mm256_loadu_ps(run.column + j)), offset);
}
#endif

// The arrays of one run, each already advanced to the run's first element: `worker` and `owner`
// are null where the run has no such residuals.
struct RunArrays {
  const float* step;
  float* out;
  float* worker;
  float* owner;
};

// The run's n elements: the residuals follow old / new scale and the step is divided by the new
// one. The compiler vectorizes this loop for any CPU.
void apply_run_portable(int64_t n, const ScaleRun& old_run, const ScaleRun& new_run, const RunArrays& a) {
  for (int64_t j = 0; j < n; ++j) {
    const float v = new_run.at(j);
    const float change = old_run.at(j) / v;
    if (a.worker) a.worker[j] *= change;
    if (a.owner) a.owner[j] *= change;
    a.out[j] = a.step[j] / v;
  }
}

void multiply_run_portable(int64_t n, const ScaleRun& run, float* data) {
  for (int64_t j = 0; j < n; ++j) data[j] *= run.at(j);
}

#if defined(__x86_64__)
// The same operations on 8 elements at a time, both scales computed in registers from the
// statistics (so the same bits, and no per-element array of scales to read and write).
__attribute__((target("avx"))) void apply_run_avx(int64_t n, const ScaleRun& old_run, const ScaleRun& new_run,
                                                  const RunArrays& a) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 v = scales_avx(new_run, j);
    const __m256 change = _mm256_div_ps(scales_avx(old_run, j), v);
    if (a.worker) _mm256_storeu_ps(a.worker + j, _mm256_mul_ps(_mm256_loadu_ps(a.worker + j), change));
    if (a.owner) _mm256_storeu_ps(a.owner + j, _mm256_mul_ps(_mm256_loadu_ps(a.owner + j), change));
    _mm256_storeu_ps(a.out + j, _mm256_div_ps(_mm256_loadu_ps(a.step + j), v));
  }
  apply_run_portable(n - j, old_run.advanced(j), new_run.advanced(j),
                     RunArrays{a.step + j, a.out + j, a.worker ? a.worker + j : nullptr, a.owner ? a.owner + j : nullptr});
}

__attribute__((target("avx"))) void multiply_run_avx(int64_t n, const ScaleRun& run, float* data) {
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(data + j, _mm256_mul_ps(_mm256_loadu_ps(data + j), scales_avx(run, j)));
  for (; j < n; ++j) data[j] *= run.at(j);
}
#endif

// The scales of one parameter's elements from its smoothed statistics (laid out as
// scale_statistics writes them): element (i, j) gets sqrt(row_i / whole) * sqrt(col_j) + offset,
// a single-row parameter sqrt(whole) + offset, where offset = floor * sqrt(whole) and whole has
// kTinyMeanSquare added.
class ParameterScales {
 public:
  void set(const float* smoothed, const ScaleFactor& f, float floor) {
    factor_ = f;
    smoothed_ = smoothed;
    total_ = smoothed[scale_statistics_count(f) - 1] + kTinyMeanSquare;
    const float root_total = std::sqrt(total_);
    offset_ = floor * root_total;
    if (f.rows == 1) {
      single_ = root_total + offset_;
      return;
    }
    column_.resize(static_cast<size_t>(f.cols));
    for (int64_t j = 0; j < f.cols; ++j) column_[static_cast<size_t>(j)] = std::sqrt(smoothed[f.rows + j]);
  }

  // Runs: one per row, of `run_length()` elements (a single-row parameter: one run of all).
  int64_t runs() const { return factor_.rows; }
  int64_t run_length() const { return factor_.cols; }
  ScaleRun run(int64_t i) const {
    if (factor_.rows == 1) return ScaleRun{nullptr, 0.0f, single_};
    return ScaleRun{column_.data(), std::sqrt(smoothed_[i] / total_), offset_};
  }

 private:
  ScaleFactor factor_;
  const float* smoothed_ = nullptr;
  float total_ = 0.0f, offset_ = 0.0f, single_ = 0.0f;
  std::vector<float> column_;
};

// Applies the scales of elements [begin, begin + n) of the bucket, in up to three stretches:
// before, within and after the owner's residuals.
class RunApplier {
 public:
  RunApplier(const float* step, float* out, const ScaleResiduals& residuals)
      : step_(step), out_(out), residuals_(residuals) {}

  void apply(int64_t begin, int64_t n, const ScaleRun& old_run, const ScaleRun& new_run) {
    const int64_t end = begin + n;
    const int64_t first = residuals_.owner ? std::clamp(residuals_.owner_offset, begin, end) : end;
    const int64_t last = residuals_.owner ? std::clamp(residuals_.owner_offset + residuals_.owner_count, first, end)
                                          : end;
    stretch(begin, first, old_run, new_run, begin, false);
    stretch(first, last, old_run, new_run, begin, true);
    stretch(last, end, old_run, new_run, begin, false);
  }

 private:
  void stretch(int64_t from, int64_t to, const ScaleRun& old_run, const ScaleRun& new_run, int64_t run_begin,
               bool owned) {
    if (to <= from) return;
    const ScaleRun o = old_run.advanced(from - run_begin), v = new_run.advanced(from - run_begin);
    const RunArrays a{step_ + from, out_ + from, residuals_.worker ? residuals_.worker + from : nullptr,
                      owned ? residuals_.owner + (from - residuals_.owner_offset) : nullptr};
#if defined(__x86_64__)
    if (cpu_has_avx()) {
      apply_run_avx(to - from, o, v, a);
      return;
    }
#endif
    apply_run_portable(to - from, o, v, a);
  }

  const float* step_;
  float* out_;
  ScaleResiduals residuals_;
};

}  // namespace

void scale_apply(const float* previous, const float* smoothed, const ScaleFactor* factors, int32_t count, float floor,
                 const float* step, float* out, const ScaleResiduals& residuals) {
  RunApplier applier(step, out, residuals);
  ParameterScales old_scales, new_scales;
  int64_t begin = 0;  // the parameter's first element within the bucket
  for (int32_t p = 0; p < count; ++p) {
    old_scales.set(previous, factors[p], floor);
    new_scales.set(smoothed, factors[p], floor);
    for (int64_t i = 0; i < new_scales.runs(); ++i, begin += new_scales.run_length()) {
      applier.apply(begin, new_scales.run_length(), old_scales.run(i), new_scales.run(i));
    }
    const int64_t stats = scale_statistics_count(factors[p]);
    previous += stats;
    smoothed += stats;
  }
}

void scale_multiply(const float* smoothed, const ScaleFactor* factors, int32_t count, float floor, float* data) {
  ParameterScales scales;
  for (int32_t p = 0; p < count; ++p) {
    scales.set(smoothed, factors[p], floor);
    for (int64_t i = 0; i < scales.runs(); ++i, data += scales.run_length()) {
#if defined(__x86_64__)
      if (cpu_has_avx()) {
        multiply_run_avx(scales.run_length(), scales.run(i), data);
        continue;
      }
#endif
      multiply_run_portable(scales.run_length(), scales.run(i), data);
    }
    smoothed += scale_statistics_count(factors[p]);
  }
}

}  // namespace relax
