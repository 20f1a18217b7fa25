"""How many workers hvd.elastic adds: the capacity from --max-np and the host discovery script.

Single process: the script's output and the settings relaxrun would export are set here;
tests/test_elastic.py grows real jobs.
"""

from __future__ import annotations

import pytest

from relaxlib import basics, elastic
from relaxlib.errors import ProcessFailedError, RelaxError


@pytest.fixture
def script(tmp_path, monkeypatch):
    """A discovery script printing ``lines`` (set through the returned function), counting its runs."""
    path, runs = tmp_path / "discover.sh", tmp_path / "runs"

    def printing(*lines: str) -> None:
        body = "".join(f"echo '{line}'\n" for line in lines)
        path.write_text(f"#!/bin/sh\necho run >> {runs}\n{body}")
        path.chmod(0o755)
        monkeypatch.setattr(elastic, "_discovered", {"at": None, "slots": 0})

    monkeypatch.setenv("RELAX_ELASTIC_DISCOVERY", str(path))
    printing.runs = lambda: len(runs.read_text().split()) if runs.exists() else 0
    return printing


def test_slots_are_summed_and_capped_by_max_np(script, monkeypatch, caplog):
    monkeypatch.setenv("RELAX_ELASTIC_SLOTS", "3")
    monkeypatch.setenv("RELAX_ELASTIC_MAX_NP", "16")
    script("a:2", "b", "c:x")
    assert elastic.capacity() == 5  # a:2 + b (3 slots per host); c:x is skipped, named
    assert "printed 'c:x', not host or host:slots" in caplog.text
    monkeypatch.setenv("RELAX_ELASTIC_MAX_NP", "4")
    assert elastic.capacity() == 4


def test_the_script_runs_at_most_once_per_interval(script, monkeypatch):
    monkeypatch.setenv("RELAX_ELASTIC_MAX_NP", "8")
    script("a:2")
    assert elastic.capacity() == elastic.capacity() == 2
    assert script.runs() == 1
    monkeypatch.setattr(elastic, "DISCOVERY_INTERVAL_S", 0.0)
    assert elastic.capacity() == 2 and script.runs() == 2


def test_a_failing_script_adds_nobody(script, monkeypatch, caplog):
    monkeypatch.setenv("RELAX_ELASTIC_MAX_NP", "8")
    script("a:2")
    monkeypatch.setenv("RELAX_ELASTIC_DISCOVERY", "/nonexistent/discover.sh")
    assert elastic.capacity() == 0 and "failed" in caplog.text
    monkeypatch.setattr(basics, "size", lambda: 3)
    assert elastic.workers_to_add() == 0


def test_without_a_script_lost_ranks_are_replaced_up_to_the_launch(monkeypatch):
    monkeypatch.delenv("RELAX_ELASTIC_DISCOVERY", raising=False)
    monkeypatch.setenv("RELAX_ELASTIC_MAX_NP", "8")
    monkeypatch.setenv("RELAX_ELASTIC_LAUNCH_NP", "4")
    monkeypatch.setattr(basics, "size", lambda: 3)
    assert elastic.growth_enabled() and elastic.workers_to_add() == 1
    monkeypatch.delenv("RELAX_ELASTIC_MAX_NP")
    assert not elastic.growth_enabled()


@pytest.mark.parametrize("text, seconds", [(None, elastic.DEFAULT_ELASTIC_TIMEOUT_S), ("0", 0.0), ("2.5", 2.5)])
def test_the_elastic_timeout_is_read_from_relaxrun_or_horovod(text, seconds, monkeypatch):
    monkeypatch.delenv("HOROVOD_ELASTIC_TIMEOUT", raising=False)
    if text is None:
        monkeypatch.delenv("RELAX_ELASTIC_TIMEOUT", raising=False)
    else:
        monkeypatch.setenv("RELAX_ELASTIC_TIMEOUT", text)
    assert elastic.elastic_timeout() == seconds


@pytest.mark.parametrize("text", ["-1", "soon", "nan", "inf"])
def test_an_elastic_timeout_that_is_not_seconds_is_named(text, monkeypatch):
    monkeypatch.setenv("RELAX_ELASTIC_TIMEOUT", text)
    with pytest.raises(ValueError, match=f"RELAX_ELASTIC_TIMEOUT={text} is not a number of seconds"):
        elastic.elastic_timeout()


class _OneRankState:
    """The broadcast of a one-rank world (rank 0 decides and hears itself), recording each decision."""

    def __init__(self):
        self.decisions = []
        self._rank = lambda: 0

    def _bcast_object(self, value):
        self.decisions.append(value)
        return value


def test_below_min_np_waits_for_capacity_then_grows(monkeypatch):
    """Rank 0 broadcasts "wait" while the capacity is short, then "grow" with what is missing."""
    capacities = iter([1, 1, 3])
    grown = []
    monkeypatch.setenv("RELAX_ELASTIC_MAX_NP", "3")
    monkeypatch.setattr(elastic, "_growth_failed", [])
    monkeypatch.setattr(elastic, "DISCOVERY_INTERVAL_S", 0.0)
    monkeypatch.setattr(elastic, "capacity", lambda: next(capacities))
    monkeypatch.setattr(basics, "size", lambda: 1)
    monkeypatch.setattr(basics, "grow", grown.append)
    monkeypatch.setattr(basics, "rank", lambda: 0)
    state = _OneRankState()
    elastic._grow_back_to(3, state, ProcessFailedError("rank 1 lost"), timeout=60)
    assert state.decisions == [("wait", 0), ("wait", 0), ("grow", 2)] and grown == [2]


def test_below_min_np_a_capacity_that_cannot_be_read_fails_every_rank(monkeypatch):
    """An error in rank 0's reading of the capacity is broadcast as the failure, never left with
    the other ranks waiting in the broadcast."""
    def broken():
        raise ValueError("RELAX_ELASTIC_SLOTS=x")
    monkeypatch.setenv("RELAX_ELASTIC_MAX_NP", "3")
    monkeypatch.setattr(elastic, "_growth_failed", [])
    monkeypatch.setattr(elastic, "capacity", broken)
    monkeypatch.setattr(basics, "size", lambda: 1)
    state = _OneRankState()
    with pytest.raises(ProcessFailedError, match="the capacity could not be read: RELAX_ELASTIC_SLOTS=x"):
        elastic._grow_back_to(3, state, ProcessFailedError("rank 1 lost"), timeout=60)
    assert state.decisions[0][0] == "fail"


def test_below_min_np_a_failed_growth_is_named_and_not_tried_again(monkeypatch):
    def refused(count):
        raise RelaxError("MPI_Comm_spawn failed")
    monkeypatch.setenv("RELAX_ELASTIC_MAX_NP", "3")
    monkeypatch.setattr(elastic, "_growth_failed", [])
    monkeypatch.setattr(elastic, "capacity", lambda: 3)
    monkeypatch.setattr(basics, "size", lambda: 2)
    monkeypatch.setattr(basics, "grow", refused)
    with pytest.raises(ProcessFailedError, match="adding 1 worker\\(s\\) back failed: MPI_Comm_spawn failed"):
        elastic._grow_back_to(3, _OneRankState(), ProcessFailedError("rank 1 lost"), timeout=60)
    assert not elastic.growth_enabled()
    with pytest.raises(ProcessFailedError, match="adding workers failed earlier: MPI_Comm_spawn failed"):
        elastic._grow_back_to(3, _OneRankState(), ProcessFailedError("rank 1 lost"), timeout=60)
