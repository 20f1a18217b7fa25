"""step_stats() on real ranks: compute time covers the work between steps, bytes match what each
algorithm must move (all-reduce, ring neighbour average), in torch (Keras's: tests/parallel/tf_keras.py,
where TensorFlow is loaded anyway). Launched by tests/test_torch_parallel.py with 3 ranks.
"""

import time

import torch

import relaxlib_torch as hvd
from relaxlib.algorithms import Decentralized

hvd.init()
RANK, SIZE = hvd.rank(), hvd.size()
PARAMS = 4096  # float32 weights of the model below (64 x 64, no bias)


def train(algorithm, steps: int = 4, pause: float = 0.02) -> list[dict]:
    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64, bias=False)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                         named_parameters=model.named_parameters(), algorithm=algorithm)
    for _ in range(steps):
        optimizer.zero_grad()
        model(torch.ones(2, 64)).sum().backward()
        time.sleep(pause)  # "compute" between steps
        optimizer.step()
    return hvd.step_stats()


def test_allreduce_steps_record_compute_and_ring_bytes():
    records = train(None)
    assert [r["step"] for r in records] == [1, 2, 3]  # the first step sets the baseline
    for r in records:
        assert r["compute_s"] >= 0.02 and r["wait_s"] >= 0 and r["comm_s"] >= 0
        # an all-reduce moves at least 2 (n-1)/n of the gradient bytes per rank
        assert r["bytes_sent"] >= 2 * (SIZE - 1) * PARAMS * 4 // SIZE
        assert r["bytes_received"] >= 2 * (SIZE - 1) * PARAMS * 4 // SIZE


def test_inline_and_segment_allreduces_count_ring_bytes():
    """Small all-reduces alone in a round carry their data in the round (inline) or run on the
    shared segment, as timing decides: both count what a ring moves, so steps compare."""
    before = hvd.engine_stats()
    for i in range(20):
        hvd.allreduce(torch.full((PARAMS,), float(i)), name="inline.probe")
    after = hvd.engine_stats()
    ring_bytes = 20 * (2 * (SIZE - 1) * PARAMS * 4 // SIZE)
    assert after["bytes_sent"] - before["bytes_sent"] == ring_bytes
    assert after["bytes_received"] - before["bytes_received"] == ring_bytes


def test_an_idle_rank_ticks_less_often_while_a_peer_waits_for_it():
    """Rank 0 submits an all-reduce at once, the others after 1 s of "compute". Every round in between
    changes nothing, so an idle rank's tick doubles from the cycle time (1 ms) up to
    RELAX_IDLE_TICK_MAX (5 ms): about 200 rounds a second, where ticks that stayed at 1 ms ran nearly
    1000 (rounds every member pays for, over TCP with its CPU). The sum is still exact."""
    hvd.allreduce(torch.zeros(1), name="idle.tick.start")  # every rank starts here together
    before, start = hvd.engine_stats()["rounds"], time.monotonic()
    if RANK != 0:
        time.sleep(1.0)
    result = hvd.allreduce(torch.full((4,), float(RANK)), name="idle.tick", op=hvd.Sum)
    rounds, elapsed_ms = hvd.engine_stats()["rounds"] - before, 1e3 * (time.monotonic() - start)
    assert torch.equal(result, torch.full((4,), float(sum(range(SIZE)))))
    assert rounds < elapsed_ms / 2.5, (rounds, elapsed_ms)


def test_ring_neighbour_average_sends_the_model_to_each_neighbour():
    records = train(Decentralized(topology="ring"))
    neighbours = 2 if SIZE > 2 else 1
    for r in records:
        assert r["bytes_sent"] == neighbours * PARAMS * 4 and r["bytes_received"] == neighbours * PARAMS * 4


def test_summary_of_no_steps():
    from relaxlib import telemetry
    assert telemetry.StepTelemetry().summary() == {"steps": 0}
