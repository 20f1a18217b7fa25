// Runs every registered C++ unit test; exits non-zero if any check failed.
#include "check.h"

int main() {
  int failed_cases = 0;
  for (const check::Case& c : check::registry()) {
    const int before = check::failures();
    c.body();
    const bool ok = check::failures() == before;
    failed_cases += ok ? 0 : 1;
    std::cout << (ok ? "[ OK ] " : "[FAIL] ") << c.name << "\n";
  }
  std::cout << check::registry().size() - static_cast<size_t>(failed_cases) << "/" << check::registry().size()
            << " C++ test cases passed\n";
  return failed_cases == 0 ? 0 : 1;
}
