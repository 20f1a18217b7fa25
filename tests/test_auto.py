"""relaxlib.auto: which mode --auto picks at each level, and the algorithm behind every mode."""

import pytest

from relaxlib import auto, perfmodel


def prediction(mode: str, samples_per_s: float) -> perfmodel.Prediction:
    return perfmodel.Prediction(mode, 1.0, 0.0, 0.0, 0.0, samples_per_s)


PREDICTIONS = sorted([prediction("async", 900), prediction("decentralized-ring", 700),
                      prediction("compressed-sign", 600), prediction("dear", 500), prediction("allreduce", 400)],
                     key=lambda p: -p.samples_per_s)
ALL = {p.mode for p in PREDICTIONS}


@pytest.mark.parametrize("level,expected", [("exact", "dear"), ("fp16", "dear"), ("compressed", "compressed-sign"),
                                            ("averaging", "decentralized-ring"), ("async", "async")])
def test_choice_is_the_fastest_mode_within_the_level(level, expected):
    mode, speedup = auto.choose(PREDICTIONS, level, ALL)
    assert mode == expected
    assert speedup == pytest.approx(next(p.samples_per_s for p in PREDICTIONS if p.mode == expected) / 400)


def test_unsupported_modes_are_skipped_down_to_allreduce():
    assert auto.choose(PREDICTIONS, "exact", ALL - {"dear"}) == ("allreduce", 1.0)


@pytest.mark.parametrize("mode,name,attribute,value", [
    ("allreduce", "allreduce", None, None), ("dear", "dear", None, None),
    ("compressed-uint8", "compressed_scatter_reduce", "codec", "uint8"),
    ("decentralized-random", "decentralized", "topology", "random"),
    ("partial-smart", "partial_allreduce", "generator", "smart"), ("async", "async_model_average", None, None)])
def test_every_mode_names_an_algorithm(mode, name, attribute, value):
    algorithm = auto.algorithm_for(mode)
    assert algorithm.name == name
    if attribute:
        assert getattr(algorithm, attribute) == value


def test_unknown_mode_and_level_are_rejected(monkeypatch):
    with pytest.raises(ValueError, match="unknown mode"):
        auto.algorithm_for("telepathy")
    monkeypatch.setenv("RELAX_AUTO", "reckless")
    with pytest.raises(ValueError, match="RELAX_AUTO"):
        auto.allowed_level()
