"""Which relaxation should I use? Calibrates the performance model on this launch (network,
codecs, compute per rank) and ranks every mode by predicted throughput. Collective.

Framework bindings call :func:`advise` with their measured forward/backward times and gradient
sizes (``relaxlib_torch.advise``, ``relaxlib_tf.advise``); ``relaxrun --advise`` makes the
distributed optimizer call it after a few training steps, from the step telemetry. Each mode's
kind and caveat are its own declaration (relaxlib.algorithms.modes).
"""

from __future__ import annotations

from relaxlib import basics, calibration, perfmodel
from relaxlib.algorithms import modes

BUCKET_BYTES = 25e6


def kind_of(mode: str) -> str:
    """How far a mode departs from all-reduce's mathematics (``relaxlib.algorithms.modes.KINDS``):
    exact, fp16, compressed (gradients with error feedback), averaging (models differ between
    ranks), async. A name no algorithm registered counts as averaging."""
    found = modes.find(mode)
    return found.kind if found else "averaging"


def caveat_of(mode: str) -> str:
    """What to watch for with a mode (the advisor table's last column); empty if unregistered."""
    found = modes.find(mode)
    return found.caveat if found else ""


def buckets_of(sizes_backward_order: list[int], bucket_bytes: float = BUCKET_BYTES) -> list[float]:
    """Gradient sizes (bytes, in the order backward produces them) merged into buckets."""
    buckets: list[float] = []
    for size in sizes_backward_order:
        if buckets and buckets[-1] + size <= bucket_bytes:
            buckets[-1] += size
        else:
            buckets.append(float(size))
    return buckets


def typical_bucket(buckets: list[float]) -> int:
    """The bucket size the network is calibrated at: the byte-weighted median bucket (where most
    gradient bytes travel), rounded to a multiple of 4 bytes."""
    if not buckets:
        return 0
    half, seen = sum(buckets) / 2, 0.0
    for size in sorted(buckets):
        seen += size
        if seen >= half:
            return int(size) // 4 * 4
    return 0


def advise(forward_s: float, backward_s: float, grad_bytes_backward_order: list[int], batch: int,
           network: calibration.Network | None = None, codecs: dict[str, float] | None = None,
           show: bool = True, hooks: bool = True, shapes: list[tuple[int, ...]] | None = None,
           host: calibration.HostMath | None = None) -> list[perfmodel.Prediction]:
    """Collective: calibrates what is not given, predicts every mode, prints the table on rank 0
    (``show``) and returns the predictions, fastest first. ``forward_s``/``backward_s``: this
    rank's compute per iteration (ranks may differ: the spread becomes the straggler model);
    ``hooks``: the framework overlaps communication with compute (``perfmodel.Workload.hooks``);
    ``shapes``: the gradients' shapes in the same order as their bytes (PowerSGD's matrices);
    ``host``: the host rates of PowerSGD and Top-K (measured when not given)."""
    buckets = buckets_of(grad_bytes_backward_order)
    network = network or calibration.measure_network(bucket_bytes=typical_bucket(buckets),
                                                     exchange_bytes=int(sum(buckets)) // 4 * 4)
    if codecs is None:
        codecs = calibration.measure_compressed(network, int(sum(buckets)))
    host = host or calibration.measure_host_math(int(sum(buckets)))
    spread = calibration.slowdowns(forward_s + backward_s)
    base_compute = (forward_s + backward_s) / spread[basics.rank()]  # the fastest rank's compute
    share = forward_s / (forward_s + backward_s) if forward_s + backward_s > 0 else 1 / 3
    workload = perfmodel.Workload(
        ranks=basics.size(), alpha_s=network.alpha_s, bandwidth_bytes_per_s=network.bandwidth_bytes_per_s,
        buckets=buckets, forward_s=base_compute * share, backward_s=base_compute * (1 - share), batch=batch,
        slowdown=spread, codec_bytes_per_s=codecs, reduce_scatter_alpha_s=network.reduce_scatter_alpha_s,
        exchange_bytes_per_s=network.exchange_bytes_per_s, hooks=hooks, shapes=list(shapes or []),
        host_bytes_per_s=host.host_bytes_per_s, matmul_flops_per_s=host.matmul_flops_per_s,
        select_bytes_per_s=host.select_bytes_per_s)
    predictions = perfmodel.predict_all(workload)
    if show and basics.rank() == 0:
        print(format_table(predictions, network, workload), flush=True)
    return predictions


def format_table(predictions: list[perfmodel.Prediction], network: calibration.Network,
                 workload: perfmodel.Workload) -> str:
    """The advisor's table: mode, predicted step time, speedup over all-reduce, bytes, caveat."""
    baseline = next(p for p in predictions if p.mode == modes.BASELINE)
    lines = [
        f"relaxlib advisor: {workload.ranks} ranks, alpha {1e6 * network.alpha_s:.1f} us, bandwidth "
        f"{network.bandwidth_bytes_per_s / 1e9:.2f} GB/s, model {workload.model_bytes / 1e6:.1f} MB in "
        f"{len(workload.buckets)} buckets, compute {1e3 * (workload.forward_s + workload.backward_s):.1f} ms "
        f"(slowest rank x{max(workload.speeds()):.2f})",
        f"{'mode':22s} {'step ms':>9s} {'speedup':>8s} {'MB/step':>8s}  {'kind':10s}  caveat",
    ]
    for p in predictions:
        lines.append(f"{p.mode:22s} {1e3 * p.step_s:9.1f} {p.samples_per_s / baseline.samples_per_s:7.2f}x "
                     f"{p.bytes_sent / 1e6:8.2f}  {kind_of(p.mode):10s}  {caveat_of(p.mode)}")
    best_exact = next(p for p in predictions if kind_of(p.mode) == "exact")
    lines.append(f"fastest with all-reduce's results: {best_exact.mode}; fastest overall: {predictions[0].mode} "
                 f"({kind_of(predictions[0].mode)}). Median prediction error 7 % on the reference grid "
                 "(docs/which-relaxation.md): confirm the top modes on your model.")
    return "\n".join(lines)


def advise_from_telemetry(records: list[dict], grad_bytes_backward_order: list[int],
                          forward_share: float = 1 / 3, hooks: bool = True,
                          shapes: list[tuple[int, ...]] | None = None) -> list[perfmodel.Prediction]:
    """Collective: advice from observed steps (``relaxrun --advise``). Telemetry sees forward and
    backward together; ``forward_share`` splits them (backward is usually about twice forward);
    ``shapes``: the gradients' shapes, in the order of their bytes."""
    compute = sorted(r["compute_s"] for r in records)[len(records) // 2]
    return advise(compute * forward_share, compute * (1 - forward_share), grad_bytes_backward_order, batch=1,
                  hooks=hooks, shapes=shapes)
