"""Shared launches of tests/parallel modules: one mpirun per rank group runs every module selected for it.

A top-level test names a ``RankGroup`` (world size and settings) and a module; the ``rank_groups``
fixture (tests/conftest.py) launches each group once per session, with the modules of every selected test
that names it, and each test then checks only its own module's inner results, naming rank and inner test
(tests/rank_results.py). Starting ranks is the dear part (each imports torch or TensorFlow), so modules
that need the same ranks and settings share them; the inner tests are the same as with a launch each.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from mpi_launch import RankRun, run_pytest_on_ranks

GROUP_PARAM = "rank_group"
MODULE_PARAM = "rank_module"


@dataclass(frozen=True)
class RankGroup:
    """``np`` ranks with the settings ``env`` (a tuple of pairs: hashable), one pytest on each."""

    name: str
    np: int
    env: tuple[tuple[str, str], ...] = ()
    per_test_timeout: int = 300
    module_timeout: int = 600  # the launch's bound is this times the number of modules it runs

    def __str__(self) -> str:
        return self.name


def group(name: str, np: int, **env: str) -> RankGroup:
    """A rank group with settings given as keyword arguments."""
    return RankGroup(name, np, tuple(sorted(env.items())))


class RankGroupRuns:
    """Launches each group once, on first use, with the modules the session's selected tests ask of it."""

    def __init__(self, session):
        self._session = session
        self._runs: dict[RankGroup, RankRun] = {}

    def _modules_for(self, rank_group: RankGroup) -> list[str]:
        modules = []
        for item in self._session.items:
            params = getattr(getattr(item, "callspec", None), "params", {})
            if params.get(GROUP_PARAM) == rank_group and params.get(MODULE_PARAM) not in modules:
                modules.append(params[MODULE_PARAM])
        return modules

    def run(self, rank_group: RankGroup, module: str) -> RankRun:
        """The group's launch (started now if it has not run yet), which included ``module``."""
        if rank_group not in self._runs:
            modules = self._modules_for(rank_group)
            if module not in modules:  # called outside a parametrized selection: run it alone
                modules.append(module)
            self._runs[rank_group] = run_pytest_on_ranks(
                rank_group.np, modules, env=dict(rank_group.env), per_test_timeout=rank_group.per_test_timeout,
                timeout=rank_group.module_timeout * len(modules))
        return self._runs[rank_group]

    def check(self, rank_group: RankGroup, module: str) -> None:
        """Fails unless every rank of the group ran and passed ``module``'s tests, naming rank and inner test."""
        self.run(rank_group, module).check(module)


def cases(*pairs) -> list:
    """pytest params for ``(group, module)`` pairs (or ``pytest.param`` of them, for marks), with readable ids."""
    out = []
    for pair in pairs:
        if hasattr(pair, "values"):  # already a pytest.param, e.g. with a slow mark
            group_, module = pair.values
            out.append(pytest.param(group_, module, marks=pair.marks, id=f"{module[:-3]}-{group_}"))
        else:
            group_, module = pair
            out.append(pytest.param(group_, module, id=f"{module[:-3]}-{group_}"))
    return out
