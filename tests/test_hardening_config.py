"""Issue #49 on 2 real ranks, in one launch (tests/scripts/hardening_settings.py): numeric settings
that are not finite or out of range fail init() on every rank naming the variable (they used to
hang the first all-reduce or silently disable a timeout), shapes whose size overflows int64 are
refused, and an allgather whose rows together overflow fails on every rank instead of asking the
allocation callback for a negative shape."""

import sys

import pytest

from mpi_launch import REPO, run_ranks

pytestmark = pytest.mark.mpi
SCRIPT = REPO / "tests" / "scripts" / "hardening_settings.py"
SETTINGS = ["RELAX_CYCLE_TIME=nan", "RELAX_CYCLE_TIME=inf", "RELAX_CYCLE_TIME=1e30", "RELAX_OP_TIMEOUT=nan",
            "RELAX_RING_SEGMENT_BYTES=nan", "RELAX_SHM_SLOT_BYTES=nan", "RELAX_FUSION_THRESHOLD=1e30"]


def test_bad_settings_and_overflowing_sizes_fail_on_every_rank():
    # The bound only catches a hang (a nan cycle time used to leave the first all-reduce waiting forever).
    run = run_ranks(2, [sys.executable, str(SCRIPT)], timeout=180)
    assert not run.timed_out and run.returncode == 0, run.report()
    for rank, out in enumerate(run.outputs):
        for setting in SETTINGS:
            assert f"REFUSED {setting}" in out, f"rank {rank}: {setting}\n" + run.report()
        for shape in ("[3, 4611686018427387904]", "[4294967296, 4294967296]"):
            assert f"REFUSED shape {shape}" in out, f"rank {rank}: {shape}\n" + run.report()
        assert "REFUSED allgather rows" in out and f"HARDENING-OK rank {rank}" in out, run.report()
