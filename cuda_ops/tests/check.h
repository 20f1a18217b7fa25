// A minimal test harness: TEST(name) registers a case, CHECK/CHECK_EQ record failures.
#pragma once

#include <functional>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

namespace check {

struct Case {
  const char* name;
  std::function<void()> body;
};

inline std::vector<Case>& registry() {
  static std::vector<Case> cases;
  return cases;
}

inline int& failures() {
  static int count = 0;
  return count;
}

struct Registrar {
  Registrar(const char* name, std::function<void()> body) { registry().push_back({name, std::move(body)}); }
};

inline void fail(const char* file, int line, const std::string& what) {
  ++failures();
  std::cerr << file << ":" << line << ": FAILED: " << what << "\n";
}

}  // namespace check

#define CHECK_CONCAT2(a, b) a##b
#define CHECK_CONCAT(a, b) CHECK_CONCAT2(a, b)
#define TEST(name)                                                                         \
  static void name();                                                                      \
  static check::Registrar CHECK_CONCAT(registrar_, name)(#name, name);                     \
  static void name()

#define CHECK(cond)                                        \
  do {                                                     \
    if (!(cond)) check::fail(__FILE__, __LINE__, #cond);   \
  } while (0)

#define CHECK_EQ(a, b)                                                                  \
  do {                                                                                  \
    const auto& check_a_ = (a);                                                         \
    const auto& check_b_ = (b);                                                         \
    if (!(check_a_ == check_b_)) {                                                      \
      std::ostringstream check_os_;                                                     \
      check_os_ << #a " == " #b " (" << check_a_ << " vs " << check_b_ << ")";          \
      check::fail(__FILE__, __LINE__, check_os_.str());                                 \
    }                                                                                   \
  } while (0)
