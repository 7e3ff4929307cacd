"""The README's Python examples run as written and give what they claim."""

import os
import re
from pathlib import Path

import numpy as np

README = Path(__file__).resolve().parent.parent / "README.md"


def _example(heading: str) -> str:
    text = README.read_text(encoding="utf-8")
    return re.search(rf"## {heading}\n.*?```python\n(.*?)```", text, re.S).group(1)


def test_building_blocks_example_runs():
    namespace: dict = {}
    exec(compile(_example("Building blocks from Python"), str(README), "exec"), namespace)
    assert namespace["model"].layers[2].count_params() == 8_544
    assert tuple(namespace["weights"].shape) == (1, 5, 5)
    assert float(namespace["weights"][0, 0, 3]) == 0.0
    assert tuple(namespace["cross_scores"].shape) == (1, 2, 3, 5)
    assert tuple(namespace["step"].shape) == (1, 1, 8)


def test_python_api_example_trains_loads_and_explains_every_task(tmp_path, monkeypatch):
    from kformer.models import generation
    from kformer.tasks.arithmetic import ArithmeticModel
    from kformer.tasks.classify import Classifier
    from kformer.tasks.translate import Translator

    monkeypatch.setattr(generation, "COMPILE", False)  # a handful of decoding steps: skip compiling
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(_example("From Python"), str(README), "exec"), namespace)
    assert sorted(os.listdir(tmp_path / "runs")) == ["py-arith", "py-en-es", "py-tickets"]

    tickets = namespace["tickets"]
    assert isinstance(tickets, Classifier) and tickets.labels == ["billing", "hardware"]
    best = namespace["best"]
    assert best["label"] == "hardware" and [t["label"] for t in best["top_k"]] == ["hardware", "billing"]
    assert namespace["scores"]["accuracy"] == 1.0 and namespace["scores"]["n"] == 60
    encoder = namespace["encoder"]
    assert encoder.shape[:2] == (1, 2) and encoder.shape[2] == encoder.shape[3] == 5
    np.testing.assert_allclose(encoder.sum(axis=-1), 1.0, atol=1e-5)

    assert isinstance(namespace["spanish"], Translator) and 0.0 <= namespace["bleu"] <= 100.0
    cross = namespace["cross"]
    assert cross.ndim == 4 and cross.shape[:2] == (1, 2)
    np.testing.assert_allclose(cross.sum(axis=-1), 1.0, atol=1e-5)

    sums = namespace["sums"]
    assert isinstance(sums, ArithmeticModel) and len(namespace["answers"]) == 2
    expected = np.mean([namespace["answers"][0] == 46, namespace["answers"][1] == 94])
    assert namespace["exact"] == expected
    maps = namespace["answer_maps"]
    assert set(maps.maps) == {"encoder", "decoder_self", "cross"} and maps.output.startswith("12+34=")
