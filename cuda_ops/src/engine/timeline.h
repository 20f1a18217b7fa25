// Chrome-trace timeline of the engine's work (chrome://tracing, Perfetto): one row per tensor
// with its phases (negotiation, fusion copies, communication). Written by rank 0 only, unless
// the path names the rank (timeline_path_for_rank).
#pragma once

#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "util/types.h"

namespace relax {

// The file `rank` writes for a timeline requested at `path`: with "{rank}" in the path every
// rank writes its own (each "{rank}" replaced by the world rank), as ranks differ in when they
// reach each tensor; otherwise rank 0 alone writes `path` and others get "" (Horovod's rule).
std::string timeline_path_for_rank(const std::string& path, int rank);

class Timeline {
 public:
  // Starts the trace this rank writes for a timeline requested at `path` (timeline_path_for_rank;
  // nothing when another rank writes it), replacing an active one. Its events carry `rank` as
  // their process id, so per-rank files merge into one view; `mark_cycles` adds an instant event
  // per negotiation round.
  Status start(const std::string& path, bool mark_cycles, int rank);
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
  std::string pid_ = "0";  // the rank, as the events' process id
  bool first_event_ = true;
  std::unordered_map<std::string, int> rows_;
};

}  // namespace relax
