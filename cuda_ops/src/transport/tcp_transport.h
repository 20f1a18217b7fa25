// Open MPI's TCP transport as relaxlib sets it up before initializing MPI.
//
// Open MPI sends a message above btl_tcp_eager_limit (64 KiB by default) by rendezvous: the
// receiver's acknowledgement travels on the same socket as the receiver's own outgoing data. In a
// ring step both ranks of a link send a segment at once, so one rank's acknowledgement can queue
// behind its whole outgoing segment and the two directions run one after the other. Measured over
// a 200 Mbit/s link, 2 ranks, 8 MiB all-reduce: 5 of 12 operations took 670 ms instead of the
// wire time of 339 ms, and the engine's negotiation messages queued behind the data as well. With
// every ring segment sent eagerly (one message, no acknowledgement) all 12 took 337-399 ms.
#pragma once

#include <cstdint>
#include <string>

namespace relax {

// The ring segment across nodes unless RELAX_RING_SEGMENT_BYTES sets one (EngineConfig).
constexpr int64_t kCrossNodeRingSegmentBytes = 16ll << 20;

// The eager limit relaxlib sets given RELAX_TCP_EAGER_LIMIT ("auto", "off", or bytes) and the
// ring segment across nodes: "auto" = the segment (-1: the default) plus room for Open MPI's header, "off" = 0
// (keep Open MPI's default). Throws std::invalid_argument naming a bad setting.
int64_t decide_tcp_eager_limit(const std::string& setting, int64_t ring_segment_bytes);

// Applies the decision for this process if MPI is not initialized yet and the user set neither
// btl_tcp_eager_limit nor btl_tcp_max_send_size (environment, mpirun --mca, parameter file), and
// returns a sentence for the log. Like prepare_shm_transport it runs when the library loads and
// again in init.
std::string prepare_tcp_transport(const std::string& setting, int64_t ring_segment_bytes);

}  // namespace relax
