"""Training that survives a lost rank (Open MPI 5's ULFM; tests/parallel/elastic_torch.py).

Each case launches 4 ranks with ``relaxrun --min-np``, SIGKILLs one or two of them at a chosen
batch and moment, and checks what Horovod's elastic mode promises: every survivor finishes all the
batches (nothing committed is lost), with bitwise-equal parameters, in a world re-formed without the
lost ranks. Cases that lose rank 2 or rank 0 at batch 13 both restore the commit of batch 12 and go
on with three ranks fed the same data, so they must end with the same parameters: a failed step
leaves nothing behind. Cases that cannot go on end with a clear error on every survivor.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from mpi_launch import REPO
from relaxlib_launch import build_report

SCRIPT = REPO / "tests" / "parallel" / "elastic_torch.py"
RELAXRUN = [sys.executable, "-m", "relaxlib_launch.relaxrun"]
DONE = re.compile(r"DONE world=(\d+) rank=(\d+) size=(\d+) batch=(\d+) digest=(\w+) resets=(\d+)")


def _fault_tolerance_missing() -> str | None:
    info = build_report.build_info()
    available, why = build_report.fault_tolerance(info, build_report.mpirun_version(), {})
    return None if available else why


pytestmark = [pytest.mark.mpi, pytest.mark.skipif(_fault_tolerance_missing() is not None,
                                                  reason=f"fault tolerance unavailable: {_fault_tolerance_missing()}")]


def launch(*args: str, np: int = 4, min_np: int = 2, failing: int = 0, tmp_path=None,
           options: tuple[str, ...] = (), env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """relaxrun -np <np> --min-np <min_np> <options> elastic_torch.py <args>, bounded (a hang fails the
    test). ``failing``: how many survivors are expected to fail (they wait for each other's report);
    ``env``: settings added to this process's environment."""
    env = {**os.environ, **(env or {})}
    if failing:
        done = tmp_path / "failed"
        done.mkdir()
        env.update(RELAX_TEST_DONE_DIR=str(done), RELAX_TEST_EXPECTED=str(failing))
    return subprocess.run(RELAXRUN + ["-np", str(np), "--min-np", str(min_np), *options, sys.executable, str(SCRIPT),
                                      *args],
                          capture_output=True, text=True, timeout=150, cwd=REPO, env=env)


def finished(run: subprocess.CompletedProcess) -> list[tuple[int, ...]]:
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-5000:]
    return [tuple(int(v) if v.isdigit() else v for v in m.groups()) for m in DONE.finditer(run.stdout)]


@pytest.fixture(scope="module")
def lost_at_13():
    """The parameters of the survivors of a rank lost at batch 13, by case (filled as cases run)."""
    return {}


@pytest.mark.parametrize("kill, where, survivors, resets", [
    ("2:13", "backward", 3, 1),       # gradients in flight
    ("0:13", "step", 3, 1),           # rank 0 itself, inside optimizer.step's collectives
    ("3:12", "commit", 3, 1),         # just after a commit
    ("1:9,3:30", "backward", 2, 2),   # two ranks, one after the other (two resets)
    ("1:20,2:20", "step", 2, 1),      # two ranks at once (one reset)
])
def test_survivors_lose_no_commit_and_agree_bitwise(kill, where, survivors, resets, lost_at_13):
    done = finished(launch("--kill", kill, "--where", where))
    assert len(done) == survivors, done
    killed = {int(item.split(":")[0]) for item in kill.split(",")}
    assert {d[0] for d in done} == set(range(4)) - killed
    assert sorted(d[1] for d in done) == list(range(survivors))  # renumbered in their old order
    assert all(d[2] == survivors and d[3] == 48 and d[5] == resets for d in done), done
    assert len({d[4] for d in done}) == 1, done  # bitwise-equal parameters
    if kill.endswith(":13") or kill.endswith(":12"):  # all three restore the commit of batch 12
        lost_at_13[kill] = done[0][4]
        assert len(set(lost_at_13.values())) == 1, lost_at_13


def test_below_min_np_every_survivor_fails_clearly(tmp_path):
    run = launch("--kill", "2:5", np=3, min_np=3, failing=2, tmp_path=tmp_path)
    assert run.returncode != 0
    assert "DONE" not in run.stdout
    assert run.stdout.count("ProcessFailedError") == 2 and run.stdout.count("fewer than --min-np=3") == 2, \
        run.stdout[-4000:] + run.stderr[-3000:]
    assert run.stdout.count("--max-np was not given") == 2, \
        run.stdout[-4000:] + run.stderr[-3000:]


def test_below_min_np_lost_ranks_are_added_back_within_the_elastic_timeout():
    """-np 3 --min-np 3 --max-np 3: the loss at batch 13 leaves two ranks, below --min-np, so the
    survivors add a worker back at once (not at the next commit) and the three go on from the
    commit of batch 12 to the end with equal parameters."""
    run = launch("--kill", "2:13", np=3, min_np=3, options=("--max-np", "3", "--elastic-timeout", "60"))
    done = finished(run)
    assert len(done) == 3 and all(d[2] == 3 and d[3] == 48 for d in done), done
    assert sorted(d[1] for d in done) == [0, 1, 2] and len({d[4] for d in done}) == 1, done
    assert generations(run) == [0, 2, 2], run.stdout  # two went through reset and growth, one joined
    assert "below --min-np=3, 1 worker(s) joined" in run.stdout + run.stderr


def test_below_min_np_every_survivor_fails_after_the_elastic_timeout(tmp_path):
    """The discovery script lists two slots: below --min-np=3 the survivors ask it again for
    --elastic-timeout=2 s, then every one of them fails naming the capacity."""
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\necho localhost:2\n")
    script.chmod(0o755)
    run = launch("--kill", "2:5", np=3, min_np=3, failing=2, tmp_path=tmp_path,
                 options=("--max-np", "3", "--elastic-timeout", "2", "--host-discovery-script", str(script)))
    assert run.returncode != 0 and "DONE" not in run.stdout
    assert run.stdout.count("after --elastic-timeout=2 s the capacity is 2 ranks") == 2, \
        run.stdout[-4000:] + run.stderr[-3000:]


# Every relaxation set up again over the re-formed world (Algorithm.state_for_new_world says what
# of its state carries over): a rank lost in backward (gradients or averages in flight) or rank 0
# lost inside optimizer.step, alternating so each kind of loss meets each family of algorithms.
ALGORITHM_CASES = [
    ("dear", "2:13", "backward"), ("uint8", "0:13", "step"), ("sign", "2:13", "backward"),
    ("onebit_adam", "0:13", "step"), ("powersgd", "2:13", "backward"), ("topk", "0:13", "step"),
    ("decentralized", "0:13", "step"), ("decentralized_sign", "2:13", "backward"), ("partial", "2:13", "backward"),
    ("partial_smart", "0:13", "step"), ("async", "2:13", "backward"), ("local_sgd", "0:13", "step"),
]


@pytest.mark.parametrize("algorithm, kill, where", ALGORITHM_CASES, ids=[case[0] for case in ALGORITHM_CASES])
def test_every_algorithm_goes_on_in_the_new_world(algorithm, kill, where):
    """The survivors finish every batch in one reset and end equal (model-averaging algorithms
    with average_now() at the end, inside the elastic function)."""
    done = finished(launch("--kill", kill, "--where", where, "--algorithm", algorithm))
    assert len(done) == 3 and {d[0] for d in done} == set(range(4)) - {int(kill.split(":")[0])}, done
    assert all(d[2] == 3 and d[3] == 48 and d[5] == 1 for d in done), done
    assert len({d[4] for d in done}) == 1, done


def test_compressed_algorithm_state_syncs_without_a_loss():
    """TorchState.sync broadcasts the optimizer state but each rank keeps its own error-feedback
    residuals (their shapes differ by rank when a bucket does not split evenly)."""
    done = finished(launch("--algorithm", "uint8"))
    assert len(done) == 4 and len({d[4] for d in done}) == 1 and all(d[5] == 0 for d in done), done


def test_keras_fit_survives_a_lost_rank():
    """Keras 3 fit with Horovod's elastic callbacks: the survivors finish every epoch with equal
    weights, and an all-reduce traced before the loss averages over the new world afterwards."""
    run = subprocess.run(RELAXRUN + ["-np", "4", "--min-np", "2", sys.executable,
                                     str(REPO / "tests" / "parallel" / "elastic_keras.py"), "--kill", "2:9"],
                         capture_output=True, text=True, timeout=300, cwd=REPO)
    done = finished(run)
    assert len(done) == 3 and {d[0] for d in done} == {0, 1, 3}, done
    assert all(d[2] == 3 and d[3] == 24 and d[5] == 1 for d in done), done
    assert len({d[4] for d in done}) == 1, done
    assert run.stdout.count("average_before=2.5 average_after=2.0") == 3, run.stdout


def test_keras_fit_grows_back_to_max_np_after_a_lost_rank():
    """--max-np 4: after rank 2 is lost at batch 9 of fit, a worker is added back at the next commit
    (it runs the same script, joining inside the elastic function); four ranks finish every epoch
    with equal weights, and the all-reduce traced before the loss averages over the grown world."""
    run = subprocess.run(RELAXRUN + ["-np", "4", "--min-np", "2", "--max-np", "4", sys.executable,
                                     str(REPO / "tests" / "parallel" / "elastic_keras.py"), "--kill", "2:9"],
                         capture_output=True, text=True, timeout=300, cwd=REPO)
    done = finished(run)
    assert len(done) == 4 and sorted(d[1] for d in done) == [0, 1, 2, 3], done
    assert all(d[2] == 4 and d[3] == 24 for d in done) and len({d[4] for d in done}) == 1, done
    assert generations(run) == [0, 2, 2, 2], run.stdout  # three went through reset and growth, one joined
    assert run.stdout.count("average_before=2.5 average_after=2.5") == 3, run.stdout
    assert run.stdout.count("average_before=joined average_after=2.5") == 1, run.stdout


# One per path an algorithm takes in fit: traced into the step (compressed), a host step in a
# py_function (1-bit Adam), halves around the traced update (async), model averaging traced, and
# local updates with a codec.
KERAS_ALGORITHMS = ["uint8", "onebit_adam", "async", "decentralized", "local_sgd"]


@pytest.mark.parametrize("algorithm", KERAS_ALGORITHMS)
def test_every_algorithm_goes_on_in_keras_fit(algorithm):
    """The algorithm is set up again over the new world and fit traces its step again: the
    survivors finish every epoch with equal weights (a step traced for four ranks would fail the
    core's buffer check on its error-feedback residuals)."""
    run = subprocess.run(RELAXRUN + ["-np", "4", "--min-np", "2", sys.executable,
                                     str(REPO / "tests" / "parallel" / "elastic_keras.py"), "--kill", "2:9",
                                     "--algorithm", algorithm],
                         capture_output=True, text=True, timeout=300, cwd=REPO)
    done = finished(run)
    assert len(done) == 3 and {d[0] for d in done} == {0, 1, 3}, done
    assert all(d[2] == 3 and d[3] == 24 and d[5] == 1 for d in done), done
    assert len({d[4] for d in done}) == 1, done


@pytest.mark.parametrize("algorithm", ["allreduce", "uint8"])
def test_a_rank_lost_during_the_recovery_means_one_more_reset(algorithm):
    """World rank 3 dies inside its reset callback, while the others synchronize: they restore the
    commit (laid out for four ranks) in the three-rank world and reset again, down to two."""
    done = finished(launch("--kill", "2:13", "--die-in-reset", "3", "--algorithm", algorithm))
    assert sorted(d[0] for d in done) == [0, 1], done
    assert all(d[2] == 2 and d[3] == 48 and d[5] == 2 for d in done), done
    assert len({d[4] for d in done}) == 1, done


@pytest.mark.parametrize("where", ["backward", "step"])
def test_a_frozen_rank_is_evicted_and_the_others_go_on(where):
    """SIGSTOP is not a loss MPI can see (the process lives): the others' waits end after
    RELAX_OP_TIMEOUT with StalledError naming the frozen rank; hvd.elastic kills it (a survivor on
    its host), MPI reports it lost, and the survivors finish every batch in one reset, equal. Frozen
    between backward and step (the others wait in a negotiation round), or inside step's
    collectives (the frozen rank submitted; the others wait in the transfer)."""
    run = launch("--freeze", "2:13", "--freeze-where", where, env={"RELAX_OP_TIMEOUT": "3"})
    done = finished(run)
    assert sorted(d[0] for d in done) == [0, 1, 3], done
    assert all(d[2] == 3 and d[3] == 48 and d[5] == 1 for d in done), done
    assert len({d[4] for d in done}) == 1, done
    assert "evicting a rank that did not answer within RELAX_OP_TIMEOUT" in run.stderr + run.stdout, run.stderr[-3000:]


# Open MPI's failure detector (relaxrun turns it on with eviction) with a short period, and waits
# long enough that only the detector can find a frozen rank in the test's time.
DETECTOR_ONLY = {"RELAX_OP_TIMEOUT": "600", "OMPI_MCA_mpi_ft_detector_period": "1",
                 "OMPI_MCA_mpi_ft_detector_timeout": "4"}


def test_a_frozen_rank_is_declared_failed_by_mpi_and_the_others_go_on():
    """With RELAX_OP_TIMEOUT far away, MPI's failure detector finds the frozen rank (no heartbeat
    for its timeout): the survivors re-form the world without it, kill its process (it lives on,
    stopped, and mpirun would wait for it) and finish every batch in one reset, equal."""
    run = launch("--freeze", "2:13", env=DETECTOR_ONLY)
    done = finished(run)
    assert sorted(d[0] for d in done) == [0, 1, 3], done
    assert all(d[2] == 3 and d[3] == 48 and d[5] == 1 for d in done), done
    assert len({d[4] for d in done}) == 1, done
    assert "a rank that MPI declared failed" in run.stderr + run.stdout, run.stderr[-3000:]


def test_a_rank_frozen_while_the_others_recover_means_one_more_reset():
    """Rank 2 killed at batch 13; rank 3 freezes in its reset callback (the world re-formed, the
    state not yet synchronized): the detector declares it failed, and rank 0 and 1 re-form the world
    again and finish every batch, equal."""
    done = finished(launch("--kill", "2:13", "--freeze-in-reset", "3", env=DETECTOR_ONLY))
    assert sorted(d[0] for d in done) == [0, 1], done
    assert all(d[2] == 2 and d[3] == 48 and d[5] == 2 for d in done), done
    assert len({d[4] for d in done}) == 1, done


@pytest.mark.parametrize("moment", ["shutdown", "exit"])
def test_a_rank_frozen_once_training_is_over_does_not_hold_the_job(moment):
    """Rank 2 freezes after its last batch, before hvd.shutdown() (the others' engines wait for it in
    their last round) or after it (the others wait for it at exit, where MPI_Finalize would wait
    forever): the detector declares it failed, a survivor on its host kills its process, and the job
    ends with every rank's DONE."""
    run = launch("--freeze-at-end", f"2:{moment}", env=DETECTOR_ONLY)
    done = finished(run)
    assert sorted(d[0] for d in done) == [0, 1, 2, 3], done
    assert all(d[2] == 4 and d[3] == 48 and d[5] == 0 for d in done), done
    output = run.stderr + run.stdout
    assert "lost before the job's end" in output and "a rank that MPI declared failed" in output, output[-3000:]


def test_a_frozen_rank_is_evicted_in_keras_fit():
    """The same in Keras 3 fit: the stall reaches hvd.elastic.run as a tf.errors.OpError, the frozen
    rank is killed and the survivors finish every epoch with equal weights."""
    run = subprocess.run(RELAXRUN + ["-np", "4", "--min-np", "2", sys.executable,
                                     str(REPO / "tests" / "parallel" / "elastic_keras.py"), "--freeze", "2:9"],
                         capture_output=True, text=True, timeout=300, cwd=REPO,
                         env={**os.environ, "RELAX_OP_TIMEOUT": "3"})
    done = finished(run)
    assert len(done) == 3 and {d[0] for d in done} == {0, 1, 3}, done
    assert all(d[2] == 3 and d[3] == 24 and d[5] == 1 for d in done), done
    assert len({d[4] for d in done}) == 1, done


def test_with_eviction_off_a_frozen_rank_ends_the_job_clearly_on_every_other_rank(tmp_path, monkeypatch):
    """RELAX_ELASTIC_EVICT=0: the others' waits end after RELAX_OP_TIMEOUT with StalledError naming
    the frozen rank, which hvd.elastic then does not treat as a lost rank; every other rank reports
    it and the job ends (no hang, no reset)."""
    monkeypatch.setenv("RELAX_OP_TIMEOUT", "3")
    monkeypatch.setenv("RELAX_ELASTIC_EVICT", "0")
    run = launch("--freeze", "2:13", failing=3, tmp_path=tmp_path)
    assert run.returncode != 0 and "DONE" not in run.stdout and "re-formed" not in run.stdout + run.stderr
    assert run.stdout.count("StalledError: rank 2 did not answer within RELAX_OP_TIMEOUT=3 s") == 3, \
        run.stdout[-4000:] + run.stderr[-3000:]


def test_elastic_sampler_shares_the_rest_of_the_epoch_among_the_survivors():
    """Two epochs of 384 samples, batches of 8: four ranks commit 8 batches (256 samples), a rank is
    lost at batch 9; the three survivors split the 128 left (43 each: 6 batches), then run the
    second epoch on three ranks (16 batches): 30 batches, with equal parameters."""
    done = finished(launch("--kill", "2:9", "--sampler"))
    assert len(done) == 3 and all(d[2] == 3 and d[3] == 30 and d[5] == 1 for d in done), done
    assert len({d[4] for d in done}) == 1, done


def generations(run: subprocess.CompletedProcess) -> list[int]:
    """Each finished rank's world generation (0: a worker added during the run, which saw no change)."""
    return sorted(int(g) for g in re.findall(r"^DONE .* generation=(\d+)", run.stdout, re.MULTILINE))


def test_a_lost_rank_is_replaced_with_max_np():
    """-np 4 --max-np 4: after the loss at batch 13 the three survivors go on from the commit of batch
    12, and at the next commit a new worker is spawned, synchronized from rank 0 and trains with them:
    four ranks end with equal parameters, the new one numbered last."""
    # A long setting travels to the new worker too (over Open MPI's 256-character info values, which
    # once aborted the job in MPI_Info_set).
    run = launch("--kill", "2:13", options=("--max-np", "4"), env={"RELAX_TEST_LONG_SETTING": "x" * 300})
    done = finished(run)
    assert len(done) == 4 and all(d[2] == 4 and d[3] == 48 for d in done), done
    assert sorted(d[1] for d in done) == [0, 1, 2, 3] and len({d[4] for d in done}) == 1, done
    assert generations(run) == [0, 2, 2, 2], run.stdout  # three went through reset and growth, one joined
    assert "1 worker(s) joined" in run.stdout + run.stderr


def test_a_rank_frozen_after_a_worker_joined_is_evicted_and_replaced_too():
    """Lose, grow, freeze, grow: rank 2 lost at batch 13 and replaced, then rank 3 frozen at batch 30
    in the grown world (its process id found through the merged communicator), evicted and
    replaced; four ranks end with equal parameters and mpirun exits 0 (a worker that joined and
    then survived a loss once ended as an improper exit: exit code 1)."""
    run = launch("--kill", "2:13", "--freeze", "3:30", options=("--max-np", "4"), env={"RELAX_OP_TIMEOUT": "3"})
    done = finished(run)
    assert len(done) == 4 and all(d[2] == 4 and d[3] == 48 for d in done), done
    assert sorted(d[1] for d in done) == [0, 1, 2, 3] and len({d[4] for d in done}) == 1, done
    assert generations(run) == [0, 2, 4, 4], run.stdout  # the first worker joined at 1, lived through 3 and 4
    assert "evicting a rank that did not answer" in run.stderr + run.stdout, run.stderr[-3000:]


def test_workers_are_added_up_to_the_slots_the_discovery_script_lists(tmp_path):
    """Two ranks, a discovery script listing one host and --slots-per-host 3: at the first commit
    one worker is added (no loss needed), capped by the listed capacity, not --max-np."""
    script = tmp_path / "discover.sh"
    script.write_text("#!/bin/sh\necho localhost\n")
    script.chmod(0o755)
    run = launch(np=2, min_np=1, options=("--max-np", "4", "--host-discovery-script", str(script),
                                          "--slots-per-host", "3"))
    done = finished(run)
    assert len(done) == 3 and all(d[2] == 3 and d[3] == 48 for d in done), done
    assert len({d[4] for d in done}) == 1 and generations(run) == [0, 1, 1], run.stdout


def test_down_to_one_rank_through_three_resets():
    """Alone after the third loss: the hooks registered for four ranks still work (a regression:
    synchronize() skipped them on one rank and zero_grad() refused the next step)."""
    done = finished(launch("--kill", "1:5,2:10,3:15", min_np=1))
    assert [d[:4] + (d[5],) for d in done] == [(0, 0, 1, 48, 3)], done
