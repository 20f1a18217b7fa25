// Leveled logging to stderr, prefixed with the rank. Level from RELAX_LOG_LEVEL
// (trace, debug, info, warning, error, fatal; default warning).
#pragma once

#include <sstream>
#include <string>

namespace relax {

enum class LogLevel { Trace = 0, Debug = 1, Info = 2, Warning = 3, Error = 4, Fatal = 5 };

LogLevel log_level();
void set_log_level(LogLevel level);
// Parses a level name ("debug", "WARNING", "2"); returns false when unrecognized.
bool parse_log_level(const std::string& text, LogLevel& level);
// Rank shown in log lines (-1 until known).
void set_log_rank(int rank);
void log_message(LogLevel level, const std::string& message);

}  // namespace relax

#define RELAX_LOG(LEVEL, EXPR)                                           \
  do {                                                                   \
    if (::relax::LogLevel::LEVEL >= ::relax::log_level()) {              \
      std::ostringstream relax_log_stream_;                              \
      relax_log_stream_ << EXPR;                                         \
      ::relax::log_message(::relax::LogLevel::LEVEL, relax_log_stream_.str()); \
    }                                                                    \
  } while (0)
