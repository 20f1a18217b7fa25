"""The mode registry (relaxlib.algorithms.modes): every mode an algorithm module declares is
buildable for PyTorch, predicted by the performance model and described by the advisor, and
auto / advisor / perfmodel keep no list of modes of their own."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from relaxlib import advisor, auto, calibration, groups, perfmodel, topology
from relaxlib.algorithms import Algorithm, AllReduce, modes
from relaxlib.compression import CODECS

REPO = Path(__file__).resolve().parents[1]
MODES = modes.registered()


def workload(**overrides) -> perfmodel.Workload:
    """A 4-rank workload with every codec calibrated."""
    base = dict(ranks=4, alpha_s=1e-4, bandwidth_bytes_per_s=1e8, buckets=[4e6, 4e6], forward_s=0.04,
                backward_s=0.08, batch=32, codec_bytes_per_s={codec: 1e9 for codec in CODECS})
    base.update(overrides)
    return perfmodel.Workload(**base)


def test_importing_the_algorithms_does_not_load_the_core():
    code = ("import relaxlib.algorithms, relaxlib.auto, relaxlib.advisor, relaxlib.perfmodel, relaxlib._core as c; "
            "assert c._lib is None; from relaxlib.algorithms import modes; assert 'compressed-sign' in modes.names()")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0, out.stderr


def test_names_are_unique_kebab_case_with_a_known_kind():
    assert len(set(modes.names())) == len(MODES) >= 11
    for mode in MODES:
        assert modes.NAME.fullmatch(mode.name) and mode.kind in modes.KINDS and mode.caveat
    assert modes.names()[0] == modes.BASELINE
    with pytest.raises(ValueError, match="kebab"):
        modes.Mode("compressed_uint8", "compressed", "", AllReduce, perfmodel.predict_allreduce)
    with pytest.raises(ValueError, match="already registered"):
        modes.register(MODES[0])


def test_the_registry_consumes_the_codec_topology_and_generator_tables():
    names = set(modes.names())
    assert {n for n in names if n.startswith("compressed-")} == {f"compressed-{c}" for c in CODECS}
    for codec, spec in CODECS.items():  # kind and caveat as the core registered the codec
        mode = modes.get(f"compressed-{codec}")
        assert (mode.kind, mode.caveat, dict(mode.params)) == (spec.kind, spec.caveat, {"codec": codec})
    assert {n for n in names if n.startswith("decentralized-")} == {f"decentralized-{t}" for t in topology.TOPOLOGIES}
    assert {n for n in names if n.startswith("partial-")} == {f"partial-{g}" for g in groups.GENERATORS}


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.name)
def test_every_mode_is_built_by_auto(mode):
    algorithm = auto.algorithm_for(mode.name)
    assert isinstance(algorithm, Algorithm)
    assert algorithm.describe() == mode.algorithm().describe()
    for key, value in mode.params.items():
        assert getattr(algorithm, key) == value


def test_unknown_modes_are_rejected_with_the_choices():
    for name in ("telepathy", "compressed-foo", "decentralized-star", "partial", "compressed_uint8"):
        with pytest.raises(ValueError, match="unknown mode .* allreduce, dear"):
            auto.algorithm_for(name)


@pytest.mark.parametrize("ranks", [1, 2, 4])
def test_every_mode_is_predicted_under_its_own_name(ranks):
    w = workload(ranks=ranks)
    assert sorted(p.mode for p in perfmodel.predict_all(w)) == sorted(modes.names())
    for mode in MODES:
        assert mode.predict(w, **mode.params).mode == mode.name  # the equation agrees on the name
        assert mode.prediction(w).samples_per_s > 0


def test_compressed_modes_need_their_codec_calibrated():
    predicted = {p.mode for p in perfmodel.predict_all(workload(codec_bytes_per_s={"uint8": 1e9}))}
    assert predicted == {n for n in modes.names() if not n.startswith("compressed-")} | {"compressed-uint8"}
    predicted = {p.mode for p in perfmodel.predict_all(workload(), codecs=("sign",))}
    assert {n for n in predicted if n.startswith("compressed-")} == {"compressed-sign"}


def test_every_mode_is_described_by_the_advisor():
    w = workload()
    predictions = perfmodel.predict_all(w)
    table = advisor.format_table(predictions, calibration.Network(1e-4, 1e8, 1e-3, 0.1, 1 << 20), w)
    for mode in MODES:
        assert advisor.kind_of(mode.name) == mode.kind
        assert advisor.caveat_of(mode.name) == mode.caveat
        assert any(line.startswith(f"{mode.name} ") and line.endswith(mode.caveat) for line in table.splitlines())
    assert auto.LEVELS == modes.KINDS


def test_a_registered_mode_reaches_auto_advisor_and_perfmodel(monkeypatch):
    class Telepathy(AllReduce):
        name = "telepathy"

        def __init__(self, ranks_in_mind: int) -> None:
            self.ranks_in_mind = ranks_in_mind

    def predict(w: perfmodel.Workload, ranks_in_mind: int) -> perfmodel.Prediction:
        return perfmodel.Prediction("anything", 1e-3, 0.0, 0.0, 0.0, 1e9 * ranks_in_mind)

    monkeypatch.setattr(modes, "_REGISTRY", dict(modes._REGISTRY))
    modes.register(modes.Mode("telepathy-test", "async", "reads minds", Telepathy, predict, {"ranks_in_mind": 2}))
    assert auto.algorithm_for("telepathy-test").ranks_in_mind == 2
    assert (advisor.kind_of("telepathy-test"), advisor.caveat_of("telepathy-test")) == ("async", "reads minds")
    predictions = perfmodel.predict_all(workload())
    assert predictions[0].mode == "telepathy-test" and predictions[0].samples_per_s == 2e9
    assert auto.choose(predictions, "async", set(modes.names()))[0] == "telepathy-test"


def _strings(tree: ast.AST) -> set[str]:
    return {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def test_auto_advisor_and_perfmodel_hold_no_mode_table():
    names = set(modes.names())
    families = {name.split("-")[0] for name in names}
    for module in (auto, advisor):
        tree = ast.parse(Path(module.__file__).read_text())
        assert not _strings(tree) & (names | families), module.__name__
    tree = ast.parse(Path(perfmodel.__file__).read_text())
    for node in tree.body:  # module-level tables
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            assert not _strings(node) & names, ast.unparse(node)
        if isinstance(node, ast.FunctionDef) and node.name in ("predict_all", "predictable"):
            called = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            assert not {n for n in called if n.startswith("predict_")} and not _strings(node) & names


BUILD_ALL = """
import torch
import relaxlib_torch as hvd
from relaxlib import auto
from relaxlib.algorithms import modes
hvd.init()
for name in modes.names():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
                                         named_parameters=model.named_parameters(),
                                         algorithm=auto.algorithm_for(name), model=model)
    for _ in range(2):
        optimizer.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
    if hasattr(optimizer.algorithm, "average_now"):
        optimizer.algorithm.average_now()
    print("BUILT", name, flush=True)
hvd.shutdown()
"""


def test_every_mode_trains_a_torch_model_in_one_process():
    out = subprocess.run([sys.executable, "-c", BUILD_ALL], capture_output=True, text=True, cwd=REPO, timeout=300)
    built = [line.split()[1] for line in out.stdout.splitlines() if line.startswith("BUILT ")]
    assert built == list(modes.names()), out.stdout + out.stderr
