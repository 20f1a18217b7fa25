#include "engine/timeline.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace relax {

std::string timeline_path_for_rank(const std::string& path, int rank) {
  static const std::string kPlaceholder = "{rank}";
  const std::string number = std::to_string(rank);
  std::string out = path;
  bool per_rank = false;
  for (size_t at = out.find(kPlaceholder); at != std::string::npos; at = out.find(kPlaceholder, at)) {
    out.replace(at, kPlaceholder.size(), number);
    at += number.size();
    per_rank = true;
  }
  return per_rank || rank == 0 ? out : std::string();
}

namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

long long micros(double seconds) { return static_cast<long long>(seconds * 1e6); }

// The docs suggest paths in /tmp, where anyone can plant a symbolic link at the name: fopen(..,
// "w") would follow it and truncate whatever it points to with this process's rights. So the
// last component must not be a link (O_NOFOLLOW), the file must be a regular one (not a FIFO
// that would block or a device), and a new file is private (0600). O_TRUNC rather than O_EXCL:
// writing the same path run after run (RELAX_TIMELINE=/tmp/timeline.json) is the documented use,
// and an existing regular file of the user's own is what they asked to overwrite. The file is
// truncated only after that is checked: a hard link planted at the name (another user's file, where
// protected_hardlinks is off) has st_nlink > 1, and a file another user created is not ours.
Status open_trace_file(const std::string& path, std::FILE*& out) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0600);
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP) {
      return Status::error(RELAX_ERR_INVALID_ARGUMENT, "timeline file '" + path +
                                                           "' is a symbolic link; not following it (remove it or "
                                                           "choose another path)");
    }
    return Status::error(RELAX_ERR_INVALID_ARGUMENT,
                         "cannot open timeline file '" + path + "' for writing: " + std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::error(RELAX_ERR_INVALID_ARGUMENT, "timeline file '" + path + "' is not a regular file");
  }
  if (st.st_uid != ::geteuid() || st.st_nlink != 1) {
    ::close(fd);
    return Status::error(RELAX_ERR_INVALID_ARGUMENT,
                         "timeline file '" + path + "' is " +
                             (st.st_uid != ::geteuid() ? "owned by another user" : "a hard link to another name") +
                             "; not overwriting it (remove it or choose another path)");
  }
  if (::ftruncate(fd, 0) != 0) {
    const int err = errno;
    ::close(fd);
    return Status::error(RELAX_ERR_INVALID_ARGUMENT,
                         "cannot truncate timeline file '" + path + "': " + std::strerror(err));
  }
  // O_NONBLOCK only kept open() from waiting on a FIFO; writes to the file block as usual.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  out = ::fdopen(fd, "w");
  if (!out) {
    const int err = errno;
    ::close(fd);
    return Status::error(RELAX_ERR_INVALID_ARGUMENT,
                         "cannot open timeline file '" + path + "' for writing: " + std::strerror(err));
  }
  return Status::ok();
}

}  // namespace

Status Timeline::start(const std::string& path, bool mark_cycles, int rank) {
  const std::string mine = timeline_path_for_rank(path, rank);
  if (mine.empty()) return Status::ok();
  stop();
  std::lock_guard<std::mutex> lock(mutex_);
  std::FILE* f = nullptr;
  Status opened = open_trace_file(mine, f);
  if (!opened.is_ok()) return opened;
  file_.reset(f);
  std::fputs("{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n", f);
  first_event_ = true;
  rows_.clear();
  mark_cycles_ = mark_cycles;
  pid_ = std::to_string(rank);
  active_ = true;
  write_event("{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " + pid_ +
              ", \"args\": {\"name\": \"relaxlib engine (rank " + pid_ + ")\"}}");
  write_event("{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " + pid_ +
              ", \"tid\": 0, \"args\": {\"name\": \"engine\"}}");
  return Status::ok();
}

void Timeline::stop() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!active_) return;
  std::fputs("\n]}\n", file_.get());
  file_.reset();
  active_ = false;
}

void Timeline::write_event(const std::string& json) {
  std::fputs(first_event_ ? "" : ",\n", file_.get());
  std::fputs(json.c_str(), file_.get());
  first_event_ = false;
}

int Timeline::row_of(const std::string& tensor) {
  auto it = rows_.find(tensor);
  if (it != rows_.end()) return it->second;
  const int row = static_cast<int>(rows_.size()) + 1;
  rows_.emplace(tensor, row);
  write_event("{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " + pid_ + ", \"tid\": " + std::to_string(row) +
              ", \"args\": {\"name\": " + json_string(tensor) + "}}");
  return row;
}

void Timeline::record(const std::string& tensor, const std::string& category, const char* phase, double start,
                      double end) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!active_) return;
  const int row = row_of(tensor);
  write_event("{\"name\": \"" + std::string(phase) + "\", \"cat\": " + json_string(category) +
              ", \"ph\": \"X\", \"pid\": " + pid_ + ", \"tid\": " + std::to_string(row) + ", \"ts\": " +
              std::to_string(micros(start)) + ", \"dur\": " + std::to_string(micros(end) - micros(start)) + "}");
}

void Timeline::instant(const char* name, double when) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!active_) return;
  write_event("{\"name\": \"" + std::string(name) + "\", \"ph\": \"i\", \"s\": \"t\", \"pid\": " + pid_ +
              ", \"tid\": 0, \"ts\": " + std::to_string(micros(when)) + "}");
}

}  // namespace relax
