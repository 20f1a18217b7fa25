#include "engine/process_set.h"

namespace relax {

ProcessSetState::ProcessSetState(int32_t id_, std::vector<int> world_ranks_, int rank_, MPI_Comm control,
                                 MPI_Comm data, bool owns_comms, HandleTable& handles, const EngineConfig& config,
                                 const CollectiveConfig& collective_config, Timeline& timeline,
                                 std::function<void(const std::string&)> retire)
    : id(id_),
      world_ranks(std::move(world_ranks_)),
      rank(rank_),
      coordinator(static_cast<int>(world_ranks.size()), static_cast<size_t>(config.cache_capacity), world_ranks,
                  config.joined_ranks_gather_nothing),
      collectives(data, collective_config),
      executor(collectives, handles, config, timeline, world_ranks, std::move(retire)),
      control_(control),
      data_(data),
      owns_comms_(owns_comms) {}

ProcessSetState::~ProcessSetState() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owns_comms_ && !finalized) {
    if (data_ != MPI_COMM_NULL) MPI_Comm_free(&data_);
    if (control_ != MPI_COMM_NULL) MPI_Comm_free(&control_);
  }
}

}  // namespace relax
