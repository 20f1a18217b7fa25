#include "util/logging.h"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

namespace relax {
namespace {

LogLevel initial_level() {
  LogLevel level = LogLevel::Warning;
  if (const char* env = std::getenv("RELAX_LOG_LEVEL")) parse_log_level(env, level);
  return level;
}

std::atomic<int>& level_storage() {
  static std::atomic<int> level{static_cast<int>(initial_level())};
  return level;
}

std::atomic<int> g_rank{-1};

const char* level_tag(LogLevel level) {
  switch (level) {
    case LogLevel::Trace: return "TRACE";
    case LogLevel::Debug: return "DEBUG";
    case LogLevel::Info: return "INFO";
    case LogLevel::Warning: return "WARNING";
    case LogLevel::Error: return "ERROR";
    default: return "FATAL";
  }
}

}  // namespace

LogLevel log_level() { return static_cast<LogLevel>(level_storage().load(std::memory_order_relaxed)); }

void set_log_level(LogLevel level) { level_storage().store(static_cast<int>(level)); }

bool parse_log_level(const std::string& text, LogLevel& level) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return std::tolower(c); });
  static const char* names[] = {"trace", "debug", "info", "warning", "error", "fatal"};
  for (int i = 0; i < 6; ++i) {
    if (t == names[i] || t == std::to_string(i)) {
      level = static_cast<LogLevel>(i);
      return true;
    }
  }
  if (t == "warn") {
    level = LogLevel::Warning;
    return true;
  }
  return false;
}

void set_log_rank(int rank) { g_rank.store(rank); }

void log_message(LogLevel level, const std::string& message) {
  static std::mutex mutex;
  auto now = std::chrono::system_clock::now();
  std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  localtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%H:%M:%S", &tm);
  std::lock_guard<std::mutex> lock(mutex);
  int rank = g_rank.load();
  if (rank >= 0) {
    std::fprintf(stderr, "[relaxlib %s %s rank %d] %s\n", stamp, level_tag(level), rank, message.c_str());
  } else {
    std::fprintf(stderr, "[relaxlib %s %s] %s\n", stamp, level_tag(level), message.c_str());
  }
  std::fflush(stderr);
}

}  // namespace relax
