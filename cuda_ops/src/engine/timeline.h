// Chrome-trace timeline of the engine's work (chrome://tracing, Perfetto): one row per tensor
// with its phases (negotiation, fusion copies, communication). Written by rank 0 only.
#pragma once

#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "util/types.h"

namespace relax {

class Timeline {
 public:
  // Starts a trace at `path` (replacing an active one); `mark_cycles` adds an instant event per
  // negotiation round.
  Status start(const std::string& path, bool mark_cycles);
  // Completes the JSON document and closes the file.
  void stop();
  bool active() const { return active_; }
  bool marks_cycles() const { return active_ && mark_cycles_; }

  // A phase [start, end) (steady-clock seconds) of request `tensor` of kind `category`.
  void record(const std::string& tensor, const std::string& category, const char* phase, double start, double end);
  // An instant event on the engine's row.
  void instant(const char* name, double when);

 private:
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  int row_of(const std::string& tensor);
  void write_event(const std::string& json);

  std::mutex mutex_;
  std::unique_ptr<std::FILE, Closer> file_;
  bool active_ = false;
  bool mark_cycles_ = false;
  bool first_event_ = true;
  std::unordered_map<std::string, int> rows_;
};

}  // namespace relax
