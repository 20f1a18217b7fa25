"""Inner tests for tests/test_rank_reporting.py: plain pytest on ranks (no relaxlib), failing on purpose where told.

RELAX_PROBE_FAIL_RANK: the rank whose test_fails_on_one_rank fails; RELAX_PROBE_EXIT_RANK: the rank that
ends its process inside test_ends_on_one_rank (as a crash would). Unset, every test passes.
"""

import os

from rank_results import current_rank


def _rank_named_by(variable: str) -> int | None:
    value = os.environ.get(variable, "")
    return int(value) if value.isdigit() else None


def test_passes_everywhere():
    assert current_rank() >= 0


def test_fails_on_one_rank():
    assert current_rank() != _rank_named_by("RELAX_PROBE_FAIL_RANK"), f"rank {current_rank()} told to fail"


def test_ends_on_one_rank():
    if current_rank() == _rank_named_by("RELAX_PROBE_EXIT_RANK"):
        os._exit(7)
