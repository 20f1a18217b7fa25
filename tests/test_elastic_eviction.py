"""hvd.elastic's eviction of a rank that stops answering, single process: the setting and the kill.

tests/test_elastic.py freezes real ranks (SIGSTOP) in torch and Keras jobs and checks that the
survivors go on; here a stopped child process stands in for the frozen rank the core names.
"""

from __future__ import annotations

import signal
import subprocess
import sys

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


def test_the_silent_process_on_this_host_is_killed_and_one_elsewhere_is_left(monkeypatch):
    frozen = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        frozen.send_signal(signal.SIGSTOP)
        monkeypatch.setattr(basics, "silent_peer_pids", lambda: [frozen.pid, 0])  # 0: on another host
        assert elastic._evict_silent_peers() is True
        assert frozen.wait(timeout=10) == -signal.SIGKILL
    finally:
        frozen.kill()
        frozen.wait()


def test_no_silent_peer_named_means_nothing_to_evict(monkeypatch):
    monkeypatch.setattr(basics, "silent_peer_pids", lambda: [])
    assert elastic._evict_silent_peers() is False
