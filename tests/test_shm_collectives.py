"""Shared-memory collectives: used when every rank is on this node, with exact results, and left
out (MPI instead, same results) when switched off, across nodes, or when the segment cannot be made."""

import sys
from pathlib import Path

import pytest

from mpi_launch import REPO, run_ranks

SCRIPT = str(REPO / "tests" / "scripts" / "shm_collectives.py")
pytestmark = pytest.mark.mpi


def segment_files() -> set[str]:
    return {p.name for p in Path("/dev/shm").glob("relaxlib-*")}


def run_script(np_: int, env: dict[str, str], *args: str):
    before = segment_files()
    run = run_ranks(np_, [sys.executable, SCRIPT, *args], env=env, timeout=180)
    assert run.returncode == 0, run.report()
    assert segment_files() <= before, "a shared-memory segment was left in /dev/shm"
    return run


def segments(run) -> list[str]:
    return [next((line for line in out.splitlines() if line.startswith(("SEGMENTS=", "INIT-ERROR"))), "")
            for out in run.outputs]


def inline_allreduces(run) -> list[int]:
    """Per rank: all-reduces whose data travelled in their negotiation round (-1: not reported)."""
    return [int(next((line for line in out.splitlines() if line.startswith("INLINE=")), "INLINE=-1")[7:])
            for out in run.outputs]


@pytest.mark.parametrize("env, expected", [
    ({}, 1),                                # one node: on by default
    ({"RELAX_SHM_COLLECTIVES": "off"}, 0),
    ({"RELAX_LOCAL_SIZE": "1"}, 0),         # ranks on (pretended) separate nodes
])
def test_used_on_one_node_unless_switched_off(env, expected):
    """Repeated small all-reduces then also carry their data in the negotiation round (the
    script checks the bits against the negotiated run); without the segment, none can."""
    run = run_script(2, env)
    assert segments(run) == [f"SEGMENTS={expected}"] * 2
    counts = inline_allreduces(run)
    assert (all(c >= 60 for c in counts) if expected else counts == [0, 0]), counts


@pytest.mark.parametrize("np_", [3, 4])
def test_float_sums_are_in_rank_order_wherever_fusion_puts_a_tensor(np_):
    """With three or more ranks the order of a float sum shows in its bits: each element must be
    summed in rank order, whichever rank's block it lands in, so results do not change with the
    fusion batching (the script compares alone / in place / fused with numpy)."""
    run = run_script(np_, {})
    assert segments(run) == ["SEGMENTS=1"] * np_
    assert all(c >= 60 for c in inline_allreduces(run)), inline_allreduces(run)


def test_a_process_set_gets_its_own_segment():
    run = run_script(3, {}, "subset")
    assert segments(run) == ["SEGMENTS=2", "SEGMENTS=2", "SEGMENTS=1"]
    assert all(c >= 60 for c in inline_allreduces(run)[:2]), inline_allreduces(run)  # in the set's own rounds


def test_falls_back_to_mpi_with_a_warning_when_the_segment_cannot_be_reserved():
    run = run_script(2, {}, "no-room")
    assert segments(run) == ["SEGMENTS=0"] * 2
    assert all("Shared-memory collectives unavailable (rank 0: reserving" in out for out in run.outputs), run.report()


def test_ranks_configured_differently_follow_rank_0_with_a_warning():
    run = run_script(2, {"RELAX_SHM_COLLECTIVES": "off"}, "rank1-on")
    assert segments(run) == ["SEGMENTS=0"] * 2
    assert "differ between rank 0 and this rank" in run.outputs[1], run.report()


def test_an_invalid_setting_fails_init_on_every_rank():
    seen = segments(run_script(2, {"RELAX_SHM_COLLECTIVES": "yes"}))
    assert all(line.startswith("INIT-ERROR") and "RELAX_SHM_COLLECTIVES=yes" in line for line in seen), seen
