// Open MPI's MCA parameters as seen before MPI_Init: whether the user chose one (environment,
// mpirun --mca, or a parameter file), and the version of the library actually loaded. Used to set
// relaxlib's transport defaults without overriding the user's own tuning.
#pragma once

#include <functional>
#include <mutex>
#include <string>
#include <vector>

namespace relax {

// One choice of Open MPI parameters relaxlib makes through the environment before MPI_Init (the
// shared-memory copy mode, the TCP eager limit). It runs when the library loads, so that an
// application initializing MPI itself after the import gets it too, and again in init. A later
// call with other settings first takes back the variables the earlier one set; once MPI is
// initialized nothing changes. setenv runs on the thread initializing relaxlib; like MPI_Init's
// own setenv calls it would race with another thread reading the environment at that moment.
class EnvironmentChoice {
 public:
  explicit EnvironmentChoice(std::string when_mpi_was_ready) : description_(std::move(when_mpi_was_ready)) {}

  // Runs `decide` unless MPI is initialized or `settings` equal the last call's; `decide` sets
  // variables through set() and returns a sentence for the log, which prepare returns.
  std::string prepare(const std::string& settings, const std::function<std::string(EnvironmentChoice&)>& decide);
  // setenv, remembered so that the next decision can unset it.
  void set(const std::string& name, const std::string& value);

 private:
  std::mutex mutex_;
  bool done_ = false;
  std::string settings_;
  std::string description_;
  std::vector<std::string> set_;
};

// The value of environment variable `name`, or `fallback` when it is unset or empty.
std::string env_or(const char* name, const std::string& fallback);

#ifdef OPEN_MPI
// Open MPI's major version from the library actually loaded (callable before MPI_Init); 0 if unknown.
int open_mpi_major_version();

// Whether one of Open MPI's parameter files (the user's, the system's, or those listed in
// OMPI_MCA_mca_base_param_files) sets one of `names` (without the OMPI_MCA_ prefix).
bool set_in_parameter_files(const std::vector<std::string>& names);

// Whether the user chose any of `names`: OMPI_MCA_<name> in the environment (mpirun --mca sets
// it) or a parameter file.
bool user_chose_parameter(const std::vector<std::string>& names);
#endif

}  // namespace relax
