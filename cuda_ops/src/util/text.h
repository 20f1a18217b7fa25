// Text formatting shared by error messages across the core.
#pragma once

#include <sstream>
#include <string>
#include <vector>

namespace relax {

// "[1, 2, 3]": a list of ranks, a shape or split sizes as they appear in error messages.
template <typename T>
std::string bracketed_list(const std::vector<T>& items) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < items.size(); ++i) os << (i ? ", " : "") << items[i];
  os << ']';
  return os.str();
}

// Whether `setting` is one of the values a tri-state setting takes: auto, on or off.
inline bool is_auto_on_off(const std::string& setting) {
  return setting == "auto" || setting == "on" || setting == "off";
}

inline std::string rank_list(const std::vector<int>& ranks) { return bracketed_list(ranks); }

}  // namespace relax
