"""Shared-memory collectives: used when every rank is on this node, with exact results, and left
out (MPI instead, same results) when switched off, across nodes, or when the segment cannot be made."""

import sys

import pytest

from mpi_launch import REPO, run_ranks

SCRIPT = str(REPO / "tests" / "scripts" / "shm_collectives.py")
pytestmark = pytest.mark.mpi


def run_script(np_: int, env: dict[str, str], *args: str):
    run = run_ranks(np_, [sys.executable, SCRIPT, *args], env=env, timeout=180)
    assert run.returncode == 0, run.report()
    return run


def segments(run) -> list[str]:
    return [next((line for line in out.splitlines() if line.startswith(("SEGMENT=", "INIT-ERROR"))), "")
            for out in run.outputs]


@pytest.mark.parametrize("env, expected", [
    ({}, "yes"),                               # one node: on by default
    ({"RELAX_SHM_COLLECTIVES": "off"}, "no"),
    ({"RELAX_LOCAL_SIZE": "1"}, "no"),         # ranks on (pretended) separate nodes
])
def test_used_on_one_node_unless_switched_off(env, expected):
    assert segments(run_script(2, env)) == [f"SEGMENT={expected}"] * 2


def test_a_process_set_gets_its_own_segment_and_non_members_none():
    assert segments(run_script(3, {}, "subset")) == ["SEGMENT=yes", "SEGMENT=yes", "SEGMENT=no"]


def test_falls_back_to_mpi_when_the_segment_cannot_be_reserved():
    run = run_script(2, {"RELAX_SHM_SLOT_BYTES": str(10**15), "RELAX_LOG_LEVEL": "info"})
    assert segments(run) == ["SEGMENT=no"] * 2
    assert all("Shared-memory collectives unavailable (rank 0: " in out for out in run.outputs), run.report()


def test_an_invalid_setting_fails_init_on_every_rank():
    seen = segments(run_script(2, {"RELAX_SHM_COLLECTIVES": "yes"}))
    assert all(line.startswith("INIT-ERROR") and "RELAX_SHM_COLLECTIVES=yes" in line for line in seen), seen
