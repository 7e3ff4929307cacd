"""The arithmetic task through the Python API: train, resume, load, solve, explain, errors."""

import json

import numpy as np
import pytest

import kformer
from kformer.errors import BadInput
from kformer.tasks import arithmetic

TINY = dict(digits=2, held_out_size=20, dim=16, heads=2, ff_dim=32, encoder_layers=1, decoder_layers=1,
            batch_size=32, steps_per_epoch=5, epochs=1, warmup_steps=2, jit_compile=False,
            held_out_per_length=4)  # scoring by length (1,000 a length by default) is not what these test


@pytest.fixture(autouse=True)
def eager_decoding(monkeypatch):
    from kformer.models import generation

    monkeypatch.setattr(generation, "COMPILE", False)  # a handful of decoding steps: skip compiling


@pytest.mark.slow
def test_train_resume_load_solve_and_explain(tmp_path):
    out = tmp_path / "arith"
    events = []
    first = arithmetic.train(TINY, None, out, progress=events.append)
    assert first.metrics["steps"] == 5 and first.folder == out
    assert [e.stage for e in events][0] == "compiling" and events[-1].stage == "done"
    assert [e.epoch for e in events if e.stage == "epoch"] == [1]
    # Resume with more epochs: the run continues at epoch 2 from the checkpoint, not from scratch.
    resumed = arithmetic.train({**TINY, "epochs": 3}, None, out, resume=True)
    assert resumed.metrics["steps"] == 10
    state = json.loads((out / "training" / "checkpoint.json").read_text())
    assert state["epochs_done"] == 3
    history = (out / "training" / "history.csv").read_text().splitlines()
    assert [row.split(",")[0] for row in history[1:]] == ["0", "1", "2"]

    model = kformer.load(out)
    assert isinstance(model, arithmetic.ArithmeticModel) and model.task == "arithmetic"
    problems = ["12+34", "99-5", (7, "-", 80)]
    answers = model.solve(problems)
    # each answer is what the network writes, read by the format: an int where it wrote a number
    # (a few training steps may write none: None); greedy decoding gives the same, row by row
    from kformer.models.generation import greedy_decode

    fmt = model.format
    written = greedy_decode(model.model, fmt.encode_sources([(12, "+", 34), (99, "-", 5), (7, "-", 80)]),
                            fmt.target_length)
    assert answers == [fmt.decode_answer(row) for row in written] and len(answers) == 3
    # the format reads a written answer to its value, and text that is no number to None
    right = fmt.vocabulary.encode(fmt.answer_text(46, fmt.width(12, 34)))
    assert fmt.decode_answer(right) == 46 and fmt.decode_answer([]) is None
    with pytest.raises(BadInput) as caught:
        model.solve(["12+34", "12*34"])  # a malformed problem: an error naming it, not an answer
    assert caught.value.field == "problems[1]"
    assert model.solve(problems[::-1]) == answers[::-1]  # batching and order do not change answers
    report = model.evaluate(["12+34=46", "99-5=94"])
    assert report["n"] == 2 and report["exact_match"] == pytest.approx(((answers[0] == 46) + (answers[1] == 94)) / 2)
    predictions = model.predict(["12+34"], beam=1)
    assert predictions == [{"problem": "12+34", "answer": answers[0], "text": "?" if answers[0] is None else f"={answers[0]}"}]

    maps = model.attention_maps("12+34")
    enc, cross = maps.maps["encoder"], maps.maps["cross"]
    assert enc.shape[:2] == (1, 2) and enc.shape[2] == enc.shape[3] == len(maps.rows["encoder"])
    assert cross.shape[3] == len(maps.cols["cross"]) and cross.shape[2] == len(maps.rows["cross"])
    np.testing.assert_allclose(cross.sum(axis=-1), 1.0, atol=1e-5)
    assert maps.output.startswith("12+34=")
    assert json.loads(json.dumps(maps.to_json()))["maps"]["encoder"]["rows"] == maps.rows["encoder"]


def test_bad_problems_and_settings_name_the_field(tmp_path):
    with pytest.raises(BadInput) as caught:
        arithmetic.train({**TINY, "ops": "+/"}, None, tmp_path / "x")
    assert caught.value.field == "ops" and "'+-*'" in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(BadInput) as caught:
        arithmetic.train({**TINY, "epochs": "two"}, None, tmp_path / "x")
    assert caught.value.field == "epochs" and "whole number" in str(caught.value)
    with pytest.raises(BadInput) as caught:
        arithmetic.train({**TINY, "colour": "red"}, None, tmp_path / "x")
    assert caught.value.field == "colour"
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_a_product_model_trains_loads_solves_evaluates_and_is_served(tmp_path):
    """Plumbing only (a few steps cannot learn products): the folder of an ops '*' run loads, its
    answers are ints or None, evaluate scores held-out products, the service answers products
    and refuses ones wider than the model."""
    import asyncio

    from test_server_api import serving

    out = tmp_path / "times"
    result = arithmetic.train({**TINY, "ops": "*", "held_out_per_length": 4}, None, out)
    assert result.metrics["held_out_size"] == 20 and list(result.metrics["by_length"]) == ["1", "2"]
    model = kformer.load(out)
    assert model.format.ops == "*" and model.format.target_length == 2 * 2 + 2  # 4 digits, the sign, END
    answers = model.solve(["12*34", (99, "*", 99)])
    assert len(answers) == 2 and all(a is None or isinstance(a, int) for a in answers)
    report = model.evaluate(digits=2, limit=5)
    assert report["n"] == 5 and 0 <= report["exact_match"] <= 1
    for bad in ("123*4", "12+3"):  # wider than the model, an operator it never learned
        with pytest.raises(BadInput, match="outside what this model learned"):
            model.solve([bad])

    async def rest():
        async with serving({"times": out}) as (client, _):
            answer = await client.post("/v1/models/times:predict", json={"instances": ["12*34"]})
            assert answer.status_code == 200 and answer.json()["predictions"][0]["problem"] == "12*34"
            wide = await client.post("/v1/models/times:predict", json={"instances": ["12*34", "123*4"]})
            assert wide.status_code == 422 and wide.json()["field"] == "instances[1]"
            assert (await client.get("/v1/models/times/metadata")).json()["ops"] == "*"

    asyncio.run(rest())
