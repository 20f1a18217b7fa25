// Open MPI's transport for large messages between ranks on one machine, chosen before relaxlib
// initializes MPI.
#pragma once

#include <string>

namespace relax {

enum class ShmCopy { kMpiDefault, kCopyInOut };

// The decision, given RELAX_SHM_SINGLE_COPY ("auto", "on" or "off"), whether the user already
// chose Open MPI's mechanism (environment or mpirun --mca), and whether this is a virtual machine.
// Throws std::invalid_argument naming the bad setting.
ShmCopy decide_shm_copy(const std::string& setting, bool user_chose, bool virtual_machine);

// Applies the decision for this process if MPI is not initialized yet, and returns a sentence
// for the log saying what was chosen and why. Runs when the library loads (so an application
// that imports relaxlib and then initializes MPI itself, e.g. through mpi4py, gets the same
// transport) and again in init, where a setting changed since the load takes effect.
std::string prepare_shm_transport(const std::string& setting);

}  // namespace relax
