"""The ``precision`` setting: a mixed_bfloat16 model trains, saves, loads and predicts, with
bfloat16 computation inside and float32 outputs."""

from __future__ import annotations

import keras
import numpy as np
import pytest
from conftest import write_tickets
from server_helpers import TINY_CLASSIFIER

from kformer.errors import BadInput


@pytest.mark.slow
def test_mixed_bfloat16_classifier_trains_saves_loads_and_predicts(tmp_path):
    from kformer import load
    from kformer.tasks import classify

    data = write_tickets(tmp_path / "tickets.csv", 120, seed=2)
    result = classify.train({**TINY_CLASSIFIER, "epochs": 2, "precision": "mixed_bfloat16"}, data, tmp_path / "m")
    assert keras.config.dtype_policy().name == "float32"  # the global policy is restored
    model = load(result.folder)
    assert model.model.get_layer("encoder_0").dtype_policy.name == "mixed_bfloat16"
    assert model.model.get_layer("classes").dtype_policy.name == "float32"
    probs = model.probabilities(["my laptop screen is broken", "refund my invoice"])
    assert probs.dtype == np.float32 and np.allclose(probs.sum(axis=1), 1.0, atol=1e-5)
    assert result.metrics["valid"]["accuracy"] > 0.5  # it learned something in 2 epochs
    assert model.metadata()["recipe"]["precision"] == "mixed_bfloat16"


def test_precision_takes_only_known_policies():
    from kformer.config import as_config
    from kformer.tasks.arithmetic import ArithmeticConfig
    from kformer.tasks.classify import ClassifyConfig
    from kformer.tasks.translate import TranslateConfig

    for config in (ClassifyConfig, TranslateConfig, ArithmeticConfig):
        assert as_config(config, {"precision": "mixed_bfloat16"}).precision == "mixed_bfloat16"
        assert config().precision == "float32"
        with pytest.raises(BadInput, match="precision"):
            as_config(config, {"precision": "float16"})
