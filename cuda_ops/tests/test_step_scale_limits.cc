// Step-scale shapes whose element or statistics counts do not fit int64 (found by fuzz_validate:
// a compressed all-reduce's step_scale shapes multiplied past INT64_MAX in scale_elements, which is
// undefined behaviour): scale_factors refuses them, naming the parameter.
#include <cstdint>
#include <vector>

#include "check.h"
#include "codecs/step_scale.h"

namespace {

relax::Status factors_of(const std::vector<int64_t>& shapes) {
  std::vector<relax::ScaleFactor> factors;
  return relax::scale_factors(shapes.data(), static_cast<int32_t>(shapes.size() / 2), factors);
}

}  // namespace

TEST(step_scale_shapes_past_int64_are_refused) {
  CHECK(!factors_of({9, INT64_MAX}).is_ok());              // one parameter's rows x cols
  CHECK(!factors_of({int64_t{1} << 32, int64_t{1} << 31}).is_ok());
  CHECK(!factors_of({1, INT64_MAX, 1, 1}).is_ok());        // the bucket's total
  CHECK(!factors_of({INT64_MAX, 1}).is_ok());              // statistics: rows + cols + 1
  const relax::Status s = factors_of({2, 3, 9, INT64_MAX});
  CHECK(s.message.find("parameter 1") != std::string::npos);
  CHECK(factors_of({2, 3, 1, INT64_MAX - 6}).is_ok());     // exactly INT64_MAX elements
  std::vector<relax::ScaleFactor> factors;
  const std::vector<int64_t> fine = {2, 3, 1, 2};
  CHECK(relax::scale_factors(fine.data(), 2, factors).is_ok());
  CHECK_EQ(relax::scale_elements(factors), int64_t{8});
}
