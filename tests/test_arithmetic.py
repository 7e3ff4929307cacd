"""Arithmetic problems: answer formats, the held-out split, scoring, and the CLI on a tiny model."""

import json
import subprocess
import sys

import numpy as np
import pytest

from kformer.cli import main
from kformer.data.arithmetic import (
    ArithmeticFormat,
    parse_problem,
    parse_problem_line,
    score_answers,
    solve,
)
from kformer.errors import KformerError
from kformer.text.specials import END_ID, START_ID


@pytest.mark.parametrize("reverse", [True, False])
def test_answers_round_trip_including_negatives(reverse):
    fmt = ArithmeticFormat(digits=4, reverse_answer=reverse)
    for value in [0, 7, 579, 5801, 19998, -1, -1985, -9999]:
        text = fmt.answer_text(value)
        assert len(text) <= fmt.answer_length
        assert fmt.parse_answer(text) == value
    assert fmt.parse_answer("") is None and fmt.parse_answer("12a") is None


def test_reversed_answers_are_least_significant_first_with_sign_last():
    fmt = ArithmeticFormat(digits=4)
    assert fmt.answer_text(5801) == "10850+"
    assert fmt.answer_text(-1985) == "51089-"  # 100000 - 1985 = 98015, reversed
    assert "".join(fmt.source_tokens(12, "-", 345)) == "0012-0345"
    assert ArithmeticFormat(digits=4, source_style="columns").source_tokens(12, "-", 345) == ["-", "2|5", "1|4", "0|3", "0|0"]
    assert fmt.problem_text(12, "-", 345) == "12-345"


def test_training_never_samples_held_out_problems():
    fmt = ArithmeticFormat(digits=2)
    held = fmt.held_out_problems(300)
    assert len(held) == len(set(held)) == 300
    assert fmt.is_held_out([p[0] for p in held], [p[1] for p in held], [p[2] for p in held]).all()
    a, ops, b = fmt.sample_training(np.random.default_rng(0), 20000)
    assert not fmt.is_held_out(a, ops, b).any()
    assert not set(zip(a.tolist(), ops.tolist(), b.tolist(), strict=True)) & set(held)
    # Some 1/8 of all problems are held out, and the split does not depend on the seed.
    rng = np.random.default_rng(1)
    anything = rng.integers(0, 100, 20000), np.array(["+", "-"])[rng.integers(0, 2, 20000)], rng.integers(0, 100, 20000)
    assert 0.08 < fmt.is_held_out(*anything).mean() < 0.17
    everything = fmt.held_out_problems(10**6)
    assert 0.08 < len(everything) / 20000 < 0.17 and set(held) <= set(everything)


def test_train_digits_limits_training_operands_and_the_headline_held_out_ones():
    fmt = ArithmeticFormat(digits=4, source_style="columns", train_digits=2)
    a, ops, b = fmt.sample_training(np.random.default_rng(0), 5000)
    assert a.max() < 100 and b.max() < 100 and a.max() >= 90  # all of 0..99, written at width 4
    assert fmt.source_tokens(int(a[0]), "+", int(b[0]))[-2:] == ["0|0", "0|0"]
    assert not fmt.is_held_out(a, ops, b).any()
    held = fmt.held_out_problems(500)
    assert max(max(x, y) for x, _, y in held) < 100  # longer ones are scored by length_problems
    assert {len(str(x)) for p in fmt.length_problems(4, 50) for x in (p[0], p[2])} == {4}
    with pytest.raises(KformerError, match="train_digits"):
        ArithmeticFormat(digits=4, train_digits=5)


def test_the_held_out_slice_of_short_numbers_did_not_move_when_long_numbers_came():
    # held out by the hash as it was before numbers could be longer than 18 digits
    before = [(5116, "+", 343), (7264, "-", 8038), (948649447137, "+", 296135156928),
              (212659523709, "-", 503675585450)]
    fmt = ArithmeticFormat(digits=30)
    assert fmt.is_held_out(*(list(c) for c in zip(*before, strict=True))).all()
    assert not fmt.is_held_out([5116, 5116 + 10**20], ["-", "+"], [343, 343]).any()


def test_mixed_lengths_write_each_problem_at_its_width_and_train_on_every_length():
    from kformer.data import digit_columns

    fmt = ArithmeticFormat(digits=30, source_style="op_columns", train_digits=6, mixed_lengths=True)
    assert fmt.source_tokens(12, "-", 345) == ["2-5", "1-4", "0-3", "[END]"]
    assert fmt.answer_text(12 - 345, fmt.width(12, 345)) == "7669-"  # 10**4 - 333, ones first
    source, target_in, target_out = fmt.training_batch(np.random.default_rng(0), 4000)
    assert source.shape == (4000, 7) and target_in.shape == target_out.shape == (4000, 9)  # 6 columns at most
    a, ops, b = fmt._training_digits(np.random.default_rng(0), 4000)
    assert set(digit_columns.lengths_of(a)) == set(range(1, 7)) == set(digit_columns.lengths_of(b))
    a, b = digit_columns.to_ints(a), digit_columns.to_ints(b)
    assert not fmt.is_held_out(a, ops, b).any()
    slow_source, slow_in, slow_out = fmt.encode(a, ops, b)  # one problem at a time, as solve() writes them
    np.testing.assert_array_equal(slow_source[:, :7], source)
    np.testing.assert_array_equal(slow_out[:, :9], target_out)
    np.testing.assert_array_equal(slow_in[:, :9], target_in)
    assert [fmt.decode_answer(row) for row in target_out[:200]] == [solve(*p) for p in zip(a, ops, b, strict=True)][:200]


def test_length_problems_are_held_out_with_exactly_that_many_digits():
    fmt = ArithmeticFormat(digits=30, source_style="op_columns", train_digits=10, mixed_lengths=True)
    problems = fmt.length_problems(25, 300)
    assert len(set(problems)) == 300 and {len(str(x)) for p in problems for x in (p[0], p[2])} == {25}
    assert fmt.is_held_out(*(list(c) for c in zip(*problems, strict=True))).all()
    assert {op for _, op, _ in problems} == {"+", "-"} and min(solve(*p) for p in problems) < 0
    source, _, target_out = fmt.encode(*(list(c) for c in zip(*problems[:20], strict=True)))
    assert [fmt.decode_answer(row) for row in target_out] == [solve(*p) for p in problems[:20]]
    assert max(max(a, b) for a, _, b in fmt.held_out_problems(500)) < 10**10  # the headline: training lengths
    with pytest.raises(KformerError, match="between 1 and 30"):
        fmt.length_problems(31, 5)
    # 19-digit numbers either side of 2**63 (which NumPy would turn into floats together)
    a, ops, b = [10**18 + 7, 2**63 + 1], ["+", "-"], [3, 10**18 + 9]
    _, _, target_out = fmt.encode(a, ops, b)
    assert [fmt.decode_answer(row) for row in target_out] == [10**18 + 10, 2**63 + 1 - 10**18 - 9]
    one_by_one = [fmt.is_held_out([x], [op], [y])[0] for x, op, y in zip(a, ops, b, strict=True)]
    assert fmt.is_held_out(a, ops, b).tolist() == one_by_one


def test_products_have_answers_of_twice_the_digits_and_sums_keep_their_lengths():
    sums, mixed = ArithmeticFormat(digits=3), ArithmeticFormat(digits=3, ops="+-*")
    assert (sums.answer_length, mixed.answer_length, ArithmeticFormat(digits=3, ops="*").answer_length) == (5, 7, 7)
    assert len(sums.vocabulary) == 16 and mixed.vocabulary.tokens[:16] == sums.vocabulary.tokens  # '*' added last
    assert solve(999, "*", 999) == 998001 and parse_problem("12*34") == (12, "*", 34)
    assert mixed.answer_text(998001, op="*") == "100899+" and mixed.answer_text(46, op="+") == "6400+"
    for value, op in [(998001, "*"), (0, "*"), (46, "+"), (-998, "-")]:
        assert mixed.parse_answer(mixed.answer_text(value, op=op)) == value
    assert ArithmeticFormat(digits=3, ops="*", reverse_answer=False).answer_text(998001, op="*") == "998001"
    with pytest.raises(KformerError, match="'[+]-[*]'"):
        ArithmeticFormat(ops="+/")


@pytest.mark.parametrize("style", ["chars", "interleaved", "columns", "op_columns"])
@pytest.mark.parametrize("ops", ["*", "+-*"])
def test_products_encode_decode_and_train_outside_the_held_out_slice(style, ops):
    from kformer.data import digit_columns

    mixed = style in ("columns", "op_columns")
    fmt = ArithmeticFormat(digits=6, ops=ops, source_style=style, train_digits=4, mixed_lengths=mixed)
    source, target_in, target_out = fmt.training_batch(np.random.default_rng(0), 600)
    a, drawn, b = fmt._training_digits(np.random.default_rng(0), 600)
    a, b = digit_columns.to_ints(a), digit_columns.to_ints(b)
    assert "*" in set(drawn) and not fmt.is_held_out(a, drawn, b).any()
    problems = list(zip(a, drawn.tolist(), b, strict=True))
    assert [fmt.decode_answer(row) for row in target_out] == [solve(*p) for p in problems]
    slow_source, slow_in, slow_out = fmt.encode(a, drawn, b)  # one problem at a time, as solve() writes them
    np.testing.assert_array_equal(slow_source[:, : source.shape[1]], source)
    np.testing.assert_array_equal(slow_out[:, : target_out.shape[1]], target_out)
    np.testing.assert_array_equal(slow_in[:, : target_in.shape[1]], target_in)
    held = fmt.length_problems(6, 50)
    assert {op for _, op, _ in held} >= {"*"} and fmt.is_held_out(*(list(c) for c in zip(*held, strict=True))).all()
    _, _, target_out = fmt.encode(*(list(c) for c in zip(*held, strict=True)))
    assert target_out.shape[1] == fmt.target_length == 2 * 6 + 2
    assert [fmt.decode_answer(row) for row in target_out] == [solve(*p) for p in held]


def test_the_held_out_slice_of_products_is_never_drawn_for_training():
    fmt = ArithmeticFormat(digits=2, ops="+-*")
    held = fmt.held_out_problems(10**6)  # all of it: a small problem space is listed whole
    products = {p for p in held if p[1] == "*"}
    assert 0.08 < len(products) / 10**4 < 0.17
    assert products != {(a, "*", b) for a, op, b in held if op == "-"}  # its own slice, not the differences'
    a, ops, b = fmt.sample_training(np.random.default_rng(0), 20000)
    drawn = set(zip(a.tolist(), ops.tolist(), b.tolist(), strict=True))
    assert {p for p in drawn if p[1] == "*"} and not drawn & products


def test_encode_teacher_forcing_arrays():
    fmt = ArithmeticFormat(digits=3)
    source, target_in, target_out = fmt.encode(np.array([12, 999]), np.array(["+", "-"]), np.array([345, 0]))
    assert source.shape == (2, 7) and target_in.shape == target_out.shape == (2, fmt.target_length)
    assert (target_in[:, 0] == START_ID).all() and (target_out[:, -1] == END_ID).all()
    np.testing.assert_array_equal(target_in[:, 1:], target_out[:, :-1])
    assert fmt.vocabulary.decode(source[0]) == "012+345"
    assert fmt.decode_answer(target_out[0]) == 357 and fmt.decode_answer(target_out[1]) == 999


def test_scores():
    scores = score_answers([5801, 5811, None, -19], [5801, 5801, 12, -1985])
    assert scores["exact_match"] == pytest.approx(0.25)
    # 4/4 + 3/4 + 0/2 + 3/5 characters ("-19" vs "-1985": "-", "1", "9" right, two missing).
    assert scores["char_accuracy"] == pytest.approx((4 + 3 + 0 + 3) / (4 + 4 + 2 + 5))


def test_problem_parsing():
    assert parse_problem(" 1234 + 4567 ") == (1234, "+", 4567)
    assert parse_problem_line("1234-4567=-3333") == ((1234, "-", 4567), -3333)
    assert parse_problem_line("9+1\t10") == ((9, "+", 1), 10)
    assert parse_problem("12 * 34") == (12, "*", 34)
    for bad in ("12/3", "12x3", "-5+3", "abc", "12+"):
        with pytest.raises(KformerError):
            parse_problem(bad)
    with pytest.raises(KformerError, match="PROBLEM=ANSWER"):
        parse_problem_line("1+1")


TINY_RECIPE = """
task = "arithmetic"
[data]
digits = 3
train_digits = 2
mixed_lengths = true
source_style = "op_columns"
held_out_size = 40
held_out_per_length = 30
[model]
positions = "abacus"
attention_window = 2
dim = 16
heads = 2
ff_dim = 32
encoder_layers = 1
decoder_layers = 1
[training]
batch_size = 64
steps_per_epoch = 10
epochs = 2
warmup_steps = 2
jit_compile = false
"""


@pytest.mark.slow
def test_cli_train_evaluate_attention_and_errors(tmp_path, capsys, monkeypatch):
    from kformer.models import generation
    from kformer.tasks import arithmetic

    monkeypatch.setattr(generation, "COMPILE", False)  # a handful of decoding steps: skip compiling
    recipe = tmp_path / "tiny.toml"
    recipe.write_text(TINY_RECIPE)
    out = tmp_path / "model"
    assert main(["train", "arithmetic", "--recipe", str(recipe), "--out", str(out), "--quiet"]) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["held_out_size"] == 40 and metrics["steps"] == 20 and metrics["recipe"]["digits"] == 3
    manifest = json.loads((out / "kformer.json").read_text())
    assert manifest["task"] == "arithmetic" and manifest["format_version"] == 1 and (out / "model.keras").is_file()
    assert manifest["max_digits"] == 3 and (out / "lengths.png").is_file()  # trained on 2 digits, accepts 3
    assert list(metrics["by_length"]) == ["1", "2", "3"] and metrics["by_length"]["3"]["n"] == 30
    printed = capsys.readouterr().out
    assert f"exact match {100 * metrics['exact_match']:.2f}%" in printed

    # The held-out scores in metrics.json are the model's answers to those problems, re-scored.
    model = arithmetic.load(out)
    held = model.format.held_out_problems(40, seed=2026)
    answers = model.solve(held)
    assert metrics["exact_match"] == pytest.approx(np.mean([a == solve(*p) for a, p in zip(answers, held, strict=True)]))

    data = tmp_path / "problems.txt"
    problems = held[:12]
    data.write_text("".join(f"{a}{op}{b}={solve(a, op, b)}\n" for a, op, b in problems) + "\n")
    assert main(["evaluate", str(out), "--data", str(data), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    expected_right = sum(a == solve(*p) for a, p in zip(answers[:12], problems, strict=True))
    assert report["n"] == 12 and report["exact_match"] == pytest.approx(expected_right / 12)
    assert len(report["wrong_examples"]) == min(10, 12 - expected_right)
    # Generated held-out problems of one length, longer than any it trained on: as metrics.json's by_length.
    assert main(["evaluate", str(out), "--digits", "3", "--limit", "30", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    longer = model.format.length_problems(3, 30)
    right = [a == solve(*p) for a, p in zip(model.solve(longer), longer, strict=True)]
    assert report["n"] == 30 and report["exact_match"] == pytest.approx(np.mean(right))
    assert report["exact_match"] == pytest.approx(metrics["by_length"]["3"]["exact_match"])

    pictures = tmp_path / "pics"
    assert main(["attention", str(out), "12+34", "--out", str(pictures)]) == 0
    names = {p.name for p in pictures.iterdir()}
    assert {"encoder_layer1.png", "encoder_grid.png", "decoder_self_grid.png", "cross_layer1.png"} <= names

    # A fresh process (nothing registered yet) loads the folder too.
    fresh = subprocess.run(
        [sys.executable, "-m", "kformer", "attention", str(out), "9-87", "--out", str(tmp_path / "fresh")],
        capture_output=True, text=True, timeout=240,
    )
    assert fresh.returncode == 0, fresh.stderr[-500:]
    assert (tmp_path / "fresh" / "cross_grid.png").is_file()

    assert main(["attention", str(out), "1234+4"]) == 2  # wider than the model's 3 digits
    assert "outside what this model learned" in capsys.readouterr().err
    data.write_text("1+1=2\nnot a problem\n")
    assert main(["evaluate", str(out), "--data", str(data)]) == 2
    assert "line 2" in capsys.readouterr().err
    assert main(["train", "arithmetic", "--out", str(tmp_path / "x"), "--ops", "/"]) == 2
    assert "--ops" in capsys.readouterr().err  # the library's field, shown as the command's flag
    assert not (tmp_path / "x").exists()


def test_the_defaults_and_the_long_recipe_train_short_and_accept_longer():
    from kformer.config import make_config
    from kformer.tasks.arithmetic import ArithmeticConfig

    demo = make_config(ArithmeticConfig, "arithmetic")  # the defaults: what the demo trains
    long = make_config(ArithmeticConfig, "arithmetic", "arithmetic-long")
    assert (demo.train_digits, demo.digits, long.train_digits, long.digits) == (4, 8, 10, 100)
    for config in (demo, long):
        fmt = config.answer_format()
        assert fmt.mixed_lengths and fmt.source_style == "op_columns"
        assert (config.positions, config.attention_window, config.encoder_layers) == ("abacus", 2, 0)


def test_long_multiplication_writes_the_rows_a_person_writes_and_reads_the_product_off_them():
    fmt = ArithmeticFormat(digits=3, ops="*", source_style="long_multiplication")
    assert (fmt.source_length, fmt.target_length) == (3 * 4 + 1, 3 * 4 + 1)
    source, target_in, target_out = fmt.encode([123], ["*"], [45])
    tokens = fmt.vocabulary.tokens
    assert [tokens[i] for i in source[0]] == fmt.source_tokens(123, "*", 45) == [
        "3*5", "2*5", "1*5", "0*5", "3*4", "2*4", "1*4", "0*4", "3*0", "2*0", "1*0", "0*0", "[END]"]
    # 123*5 = 615 at places 0..3; + 123*4 at places 1..4 = 5535; row 2 (b's 0) copies places 2..5
    rows = [tokens[i] for i in target_out[0][:-1]]
    assert rows == ["5|1", "1|1", "6|0", "0|0", "3|1", "5|1", "5|0", "0|0", "5|0", "5|0", "0|0", "0|0"]
    assert fmt.decode_answer(target_out[0]) == 5535 and target_in[0][0] == START_ID
    np.testing.assert_array_equal(target_in[0, 1:], target_out[0, :-1])


def test_long_multiplication_steps_need_only_three_tokens_at_fixed_distances():
    """Token i of the rows is (digit, carry) of: source token i's digit product + the digit of
    target token i - width (the running sum, a row earlier and one place lower) + target token
    i - 1's carry; checked on a whole training batch."""
    width = 5
    fmt = ArithmeticFormat(digits=width, ops="*", source_style="long_multiplication")
    source, _, target_out = fmt.training_batch(np.random.default_rng(3), 500)
    tokens = np.array(fmt.vocabulary.tokens)
    pairs, steps = tokens[source[:, :-1]], tokens[target_out[:, :-1]]
    product = np.vectorize(lambda t: int(t[0]) * int(t[2]))(pairs)
    digit, carry = (np.vectorize(lambda t, k=k: int(t[k]))(steps) for k in (0, 2))
    length = width + 1
    for i in range(width * length):
        row, place = divmod(i, length)
        below = digit[:, i - width] if row and place < width else 0
        total = product[:, i] + below + (carry[:, i - 1] if place else 0)
        np.testing.assert_array_equal(digit[:, i], total % 10)
        np.testing.assert_array_equal(carry[:, i], total // 10)
    a, ops, b = fmt.sample_training(np.random.default_rng(4), 300)
    assert [fmt.decode_answer(r) for r in fmt.encode(a, ops, b)[2]] == [int(x) * int(y) for x, y in zip(a, b, strict=True)]
    with pytest.raises(KformerError, match="products only"):
        ArithmeticFormat(digits=3, ops="+*", source_style="long_multiplication")


def test_a_product_model_holds_out_enough_products_for_ten_thousand_3x3_problems():
    fmt = ArithmeticFormat(digits=5, ops="*", source_style="long_multiplication")
    assert fmt.holdout_modulus == 64 and ArithmeticFormat(digits=5).holdout_modulus == 256
    assert len(fmt.length_problems(3, 10**4)) == 10**4


def test_the_multiplication_recipe_writes_long_multiplication_on_five_digits_and_accepts_seven():
    from kformer.config import make_config
    from kformer.tasks.arithmetic import ArithmeticConfig

    config = make_config(ArithmeticConfig, "arithmetic", "multiplication")
    fmt = config.answer_format()
    assert (fmt.ops, fmt.long_rows, fmt.most_trained, fmt.digits) == ("*", True, 5, 7)
    assert (config.positions, config.attention_window, config.max_minutes) == ("abacus", 0, 10)
    assert config.max_minutes <= 20  # issue 35: at most 20 minutes of training
