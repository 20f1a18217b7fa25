// Every MPI tag the core sends with, in one place. Each user owns a range; the ranges never
// overlap, so no two users can take each other's messages even if they ever shared a
// communicator (today each runs on a communicator of its own, which made the overlap between the
// pipeline's tags and the direct lane's harmless but invisible). Add a tag here, inside a range
// of its own, and list the range in kTagRanges: a static_assert checks them.
#pragma once

namespace relax {
namespace tags {

// Never sent: an MPI_Iprobe for it only drives MPI's progress (ulfm.h: drive_mpi_progress).
constexpr int kProgressProbe = 7001;
// Collectives' ring steps and pairwise exchanges on MPI point-to-point (collectives/mpi_link.cc).
constexpr int kRingStep = 7101;
// Collectives::streamed_exchange (collectives/peer_exchange.cc).
constexpr int kStreamedExchange = 7102;
// The direct lane (relaxed/direct_lane.cc): a neighbour message's header, then its data.
constexpr int kDirectHeader = 7201;
constexpr int kDirectData = 7202;
// The group service (relaxed/group_service.cc): a rank's request, the coordinator's reply.
constexpr int kGroupRequest = 7301;
constexpr int kGroupReply = 7302;
// Collectives::pipelined_scatter_gather (collectives/peer_exchange.cc): round p scatters with
// kPipelineFirst + 2p and gathers with kPipelineFirst + 2p + 1, up to the communicator's
// MPI_TAG_UB (open-ended, hence the last range; it started at 7200, inside the direct lane's).
constexpr int kPipelineFirst = 7400;
// The least MPI_TAG_UB the MPI standard guarantees.
constexpr int kGuaranteedTagUpperBound = 32767;

// One user's tags: [first, last].
struct TagRange {
  int first;
  int last;
  const char* owner;
};

constexpr TagRange kTagRanges[] = {
    {kProgressProbe, kProgressProbe, "progress probes (never sent)"},
    {kRingStep, kRingStep, "collectives: ring steps and pairwise exchanges"},
    {kStreamedExchange, kStreamedExchange, "collectives: streamed exchange"},
    {kDirectHeader, kDirectData, "direct lane"},
    {kGroupRequest, kGroupReply, "group service"},
    {kPipelineFirst, kGuaranteedTagUpperBound, "collectives: pipelined scatter-gather (up to MPI_TAG_UB)"},
};
constexpr int kTagRangeCount = static_cast<int>(sizeof(kTagRanges) / sizeof(kTagRanges[0]));

// Whether `ranges` (`count` of them) are in ascending order with no two sharing a tag.
constexpr bool disjoint(const TagRange* ranges, int count) {
  for (int i = 0; i < count; ++i) {
    if (ranges[i].first > ranges[i].last) return false;
    if (i > 0 && ranges[i].first <= ranges[i - 1].last) return false;
  }
  return true;
}
static_assert(disjoint(kTagRanges, kTagRangeCount), "MPI tag ranges overlap or are out of order (transport/tags.h)");

}  // namespace tags
}  // namespace relax
