"""Decentralized training (BAGUA's D_FP_S / D_LP_S): every rank averages its weights with its
ring or random neighbours only, never with everyone, so a slow link or a slow peer delays only
its neighbours."""

from __future__ import annotations

import os
from typing import Any

from relaxlib import perfmodel, topology
from relaxlib.algorithms import modes
from relaxlib.algorithms.averaging import AveragePlan, ModelAveraging, dtype_name
from relaxlib.algorithms.base import TrainingContext
from relaxlib.compression import CODECS


class Decentralized(ModelAveraging):
    """Neighbour averaging of the weights every ``period`` steps over ``topology`` (default:
    ``RELAX_TOPOLOGY``, set by ``relaxrun --topology``, else ring): ``"ring"`` (left and right,
    weights 1/3) or ``"random"`` (a fresh random perfect matching every step from ``seed``; with
    an odd number of ranks one rank sits a step out). ``codec`` (``"fp16"``,
    ``"uint8"``, ``"sign"``; ring only) sends compressed model differences against replicated
    estimates (CHOCO-gossip) with ``consensus_step`` (default by codec) so errors do not build up.

    ``consensus_distance()`` monitors how far the models are apart; ``average_now()`` makes them
    exactly equal (call it before evaluating or saving the final model). A rank that runs out of
    data calls ``optimizer.join()``."""

    name = "decentralized"

    def requirements(self) -> frozenset[str]:
        return super().requirements() | {"neighbor_average"}

    def __init__(self, topology: str | None = None, codec: str | None = None, period: int = 1, seed: int = 0,
                 consensus_step: float | None = None) -> None:
        if topology is None:  # relaxrun --topology sets the default
            topology = os.environ.get("RELAX_TOPOLOGY", "ring")
        if topology not in ("ring", "random"):
            raise ValueError(f"unknown topology {topology!r}; choose 'ring' or 'random'")
        if codec is not None and codec not in CODECS:
            raise ValueError(f"unknown codec {codec!r}; choose one of {sorted(CODECS)} or None")
        if codec is not None and topology != "ring":
            raise ValueError("compressed decentralized training keeps estimates of fixed neighbours: "
                             "use topology='ring'")
        if not isinstance(period, int) or period < 1:
            raise ValueError(f"period must be a positive integer, got {period!r}")
        if consensus_step is not None and not 0 < consensus_step <= 1:
            raise ValueError(f"consensus_step must be in (0, 1], got {consensus_step}")
        self.topology = topology
        self.codec = codec
        self.period = period
        self.seed = seed
        self.consensus_step = consensus_step if consensus_step is not None or codec is None \
            else CODECS[codec].consensus_step  # the codec's own

    def setup(self, ctx: TrainingContext) -> None:
        super().setup(ctx)
        self._estimates = None
        if self.codec is not None:
            if dtype_name(ctx.parameters()[0].dtype) != "float32":
                raise ValueError("compressed decentralized training needs float32 parameters")
            peers = len(topology.ring(ctx.rank, ctx.size).peers)
            self._estimates = (ctx.math.zeros(self._numel), ctx.math.zeros(self._numel * max(peers, 1)))

    def _plan(self, ctx: TrainingContext, step: int) -> AveragePlan | None:
        if step % self.period:
            return None
        row = topology.neighbors(self.topology, ctx.rank, ctx.size, step, self.seed)
        if not row.peers:
            return None
        return AveragePlan(list(row.peers), list(row.weights), f"{self.name}.{step}", row.self_weight)

    def _issue(self, ctx: TrainingContext, flat: Any, plan: AveragePlan) -> Any:
        return ctx.comm.neighbor_average_async(flat, plan.name, plan.ranks, plan.weights, plan.self_weight,
                                          codec=self.codec, estimates=self._estimates,
                                          consensus_step=self.consensus_step or 1.0, out=self._averaged)

    def state_for_new_world(self, state: dict) -> dict:
        """Nothing: the CHOCO estimates are of the old neighbours; every rank restarts them at zero
        (from the models the reset synchronized, so the estimates agree again)."""
        return {}

    def state_dict(self) -> dict:
        """The CHOCO estimates (compressed mode): needed to resume without a consensus jump."""
        if self._estimates is None:
            return {}
        return {"estimates": [self._ctx.math.clone(e) for e in self._estimates], "last_step": self._last_step}

    def load_state_dict(self, state: dict) -> None:
        """Restores what ``state_dict`` returned."""
        if state and self._estimates is not None:
            for mine, saved in zip(self._estimates, state["estimates"]):
                self._ctx.math.copy_(mine, saved)
            self._last_step = state.get("last_step", self._last_step)


modes.register(*(modes.Mode(f"decentralized-{name}", kind="averaging",
                            caveat="models differ until average_now(); more epochs may be needed", build=Decentralized,
                            predict=perfmodel.predict_decentralized, params={"topology": name}, position=20)
                 for name in topology.TOPOLOGIES))
