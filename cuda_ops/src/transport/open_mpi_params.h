// Open MPI's MCA parameters as seen before MPI_Init: whether the user chose one (environment,
// mpirun --mca, or a parameter file), and the version of the library actually loaded. Used to set
// relaxlib's transport defaults without overriding the user's own tuning.
#pragma once

#include <string>
#include <vector>

namespace relax {

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
