"""A multi-rank pytest run that fails names the inner test and the rank, not only mpirun's exit code."""

import json
from types import SimpleNamespace

import pytest
import rank_groups
from rank_results import RankResults, failure_lines, read_rank_results

from mpi_launch import RankRun, run_pytest_on_ranks

MODULE = "rank_report_probe.py"
NODE = "tests/parallel/rank_report_probe.py"


@pytest.mark.mpi
def test_a_failing_inner_test_is_named_with_its_rank_and_message():
    run = run_pytest_on_ranks(3, MODULE, env={"RELAX_PROBE_FAIL_RANK": "2"}, timeout=120)
    assert run.returncode != 0
    failures = run.failures()
    assert failures[-1] == (
        f"rank 2: {NODE}::test_fails_on_one_rank — AssertionError: rank 2 told to fail (rank_report_probe.py:22)"
    ), run.report()
    # mpirun aborts the job once rank 2 exits non-zero: a rank still running then is killed and is
    # named as such, never blamed for the failure.
    assert all(line.startswith(("rank 0: ", "rank 1: ")) and ("no test ran" in line or "did not finish" in line)
               for line in failures[:-1]), run.report()
    report = run.report()
    assert report.index("--- failed on ranks ---") < report.index("--- rank 0 ---"), report  # the summary first
    with pytest.raises(AssertionError, match=rf"rank 2: {NODE}::test_fails_on_one_rank — AssertionError"):
        run.check()


@pytest.mark.mpi
def test_a_rank_that_ends_inside_a_test_is_named_with_that_test():
    run = run_pytest_on_ranks(2, MODULE, env={"RELAX_PROBE_EXIT_RANK": "1"}, timeout=120)
    assert run.returncode != 0
    assert f"rank 1: {NODE}::test_ends_on_one_rank — did not finish (the rank ended inside it)" in run.failures(), \
        run.report()
    with pytest.raises(AssertionError, match="rank 1: .*test_ends_on_one_rank — did not finish"):
        run.check(MODULE)


@pytest.mark.mpi
def test_a_passing_run_has_no_failures():
    run = run_pytest_on_ranks(2, MODULE, timeout=120)
    run.check()
    run.check(MODULE)
    assert all(res.outcomes == {f"{NODE}::test_passes_everywhere": "passed",
                                f"{NODE}::test_fails_on_one_rank": "passed",
                                f"{NODE}::test_ends_on_one_rank": "passed"} for res in run.results)


def _write(folder, rank, *events):
    """Events as RankResultsPlugin writes them; a str is written as it is (a line cut short)."""
    (folder / f"rank{rank}.jsonl").write_text("".join((e if isinstance(e, str) else json.dumps(e)) + "\n"
                                                      for e in events))


def test_module_filter_and_ranks_that_ran_nothing(tmp_path):
    """A shared launch answers per module: another module's failure is not this one's, and a rank that
    ran none of this module's tests (it died before them, or never started) fails it."""
    _write(tmp_path, 0, {"event": "start", "nodeid": "tests/parallel/a.py::t"},
           {"event": "result", "nodeid": "tests/parallel/a.py::t", "when": "call", "outcome": "passed"},
           {"event": "start", "nodeid": "tests/parallel/b.py::u"},
           {"event": "result", "nodeid": "tests/parallel/b.py::u", "when": "call", "outcome": "failed",
            "message": "ValueError: bad"},
           {"event": "finish", "exitstatus": 1})
    _write(tmp_path, 1, {"event": "start", "nodeid": "tests/parallel/a.py::t"},
           {"event": "result", "nodeid": "tests/parallel/a.py::t", "when": "call", "outcome": "passed"},
           '{"event": "start", "nod')  # cut short by a kill
    results = read_rank_results(tmp_path, 3)
    assert failure_lines(results, "a.py") == [  # rank 1 died after a.py's test: perhaps in its teardown
        "rank 1: ended after tests/parallel/a.py::t without finishing its pytest session",
        "rank 2: no test of a.py ran (its session never finished)"]
    assert failure_lines(results, "b.py", timed_out=True) == [
        "rank 0: tests/parallel/b.py::u — ValueError: bad",
        "rank 1: no test of b.py ran (its session never finished)",
        "rank 2: no test of b.py ran (its session never finished)"]


def test_a_rank_group_launches_once_with_the_modules_of_its_selected_cases(monkeypatch):
    """Cases naming the same group share one launch holding each of their modules once; a case of another
    group is not in it; each case answers only for its own module."""

    from rank_results import RankResults

    from mpi_launch import RankRun

    two, three = rank_groups.group("two", 2), rank_groups.group("three", 3, RELAX_X="1")

    def item(group_, module):
        return SimpleNamespace(callspec=SimpleNamespace(params={rank_groups.GROUP_PARAM: group_,
                                                                rank_groups.MODULE_PARAM: module}))

    session = SimpleNamespace(items=[item(two, "a.py"), item(three, "a.py"), item(two, "b.py"), item(two, "a.py")])
    launches = []

    def fake_run(np, modules, *, env, per_test_timeout, timeout):
        launches.append((np, modules, env))
        ranks = [RankResults(r, outcomes={f"tests/parallel/{m}::t": "passed" for m in modules}, exitstatus=0)
                 for r in range(np)]
        ranks[1].outcomes["tests/parallel/b.py::t"] = "failed"
        ranks[1].failures.append(("tests/parallel/b.py::t", "AssertionError: b"))
        return RankRun(1, [""] * np, "", False, ranks)

    monkeypatch.setattr(rank_groups, "run_pytest_on_ranks", fake_run)
    runs = rank_groups.RankGroupRuns(session)
    runs.check(two, "a.py")
    with pytest.raises(AssertionError, match=r"rank 1: tests/parallel/b.py::t — AssertionError: b"):
        runs.check(two, "b.py")
    runs.check(three, "a.py")
    assert launches == [(2, ["a.py", "b.py"], {}), (3, ["a.py"], {"RELAX_X": "1"})]


def test_a_job_that_failed_with_every_inner_test_passed_fails_each_module():
    """A crash at exit (after every test passed) is nobody's inner failure, so every module of the launch fails."""
    ranks = [RankResults(r, outcomes={"tests/parallel/a.py::t": "passed"}, exitstatus=0) for r in range(2)]
    RankRun(0, ["", ""], "", False, ranks).check("a.py")
    with pytest.raises(AssertionError, match="mpirun exit code 139"):
        RankRun(139, ["", ""], "", False, ranks).check("a.py")
