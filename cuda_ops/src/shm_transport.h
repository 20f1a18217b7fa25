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

// Applies the decision for this process (call only before MPI is initialized); returns a
// sentence for the log saying what was chosen and why.
std::string apply_shm_copy(const std::string& setting);

}  // namespace relax
