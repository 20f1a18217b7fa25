"""hvd.elastic's eviction of a rank that stops answering, single process: the setting, and that the
core is asked to end the peers it named.

tests/test_elastic.py freezes real ranks (SIGSTOP) in torch and Keras jobs and checks that the
survivors go on; cuda_ops/tests/test_silent_pids.cc kills stopped sibling processes with the core's rule.
"""

from __future__ import annotations

import pytest

from relaxlib import basics, elastic


@pytest.mark.parametrize("text, enabled", [(None, True), ("1", True), ("0", False), (" 0 ", False)])
def test_eviction_is_on_unless_set_to_0(monkeypatch, text, enabled):
    if text is None:
        monkeypatch.delenv("RELAX_ELASTIC_EVICT", raising=False)
    else:
        monkeypatch.setenv("RELAX_ELASTIC_EVICT", text)
    assert elastic.eviction_enabled() is enabled


@pytest.mark.parametrize("text", ["yes", "2", ""])
def test_a_bad_eviction_setting_is_named(monkeypatch, text):
    monkeypatch.setenv("RELAX_ELASTIC_EVICT", text)
    with pytest.raises(ValueError, match=f"RELAX_ELASTIC_EVICT={text} must be 0 or 1"):
        elastic.eviction_enabled()


def test_a_bad_eviction_setting_is_named_before_training(monkeypatch):
    monkeypatch.setenv("RELAX_ELASTIC_EVICT", "sometimes")
    trained = []
    with pytest.raises(ValueError, match="RELAX_ELASTIC_EVICT"):
        elastic.run_fn(trained.append)(elastic.ObjectState(bcast_object=lambda o: o, get_rank=lambda: 0))
    assert trained == []


def test_named_silent_peers_are_ended_by_the_core(monkeypatch):
    """Which processes die is the core's rule (same launcher only; cuda_ops/tests/test_silent_pids.cc
    kills forked siblings with it): eviction asks for it once silent peers are named."""
    ended = []
    monkeypatch.setattr(basics, "silent_peer_pids", lambda: [4242, 0])  # 0: on another host
    monkeypatch.setattr(basics, "end_silent_processes", lambda: ended.append(1) or 1)
    assert elastic._evict_silent_peers() is True
    assert ended == [1]


def test_no_silent_peer_named_means_nothing_to_evict(monkeypatch):
    ended = []
    monkeypatch.setattr(basics, "silent_peer_pids", lambda: [])
    monkeypatch.setattr(basics, "end_silent_processes", lambda: ended.append(1) or 0)
    assert elastic._evict_silent_peers() is False
    assert ended == []
