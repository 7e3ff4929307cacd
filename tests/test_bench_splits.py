"""The splits the benchmarks' honesty claims rest on, on small data each test writes itself (never
../shared/data): bench/ood.py's held-out intents, bench/en_ta_levers.py's and bench/en_ta_splits.py's hold-outs,
bench/baselines.py's tuned linear baseline choosing on validation only, and
bench/arithmetic_long.py's freshly drawn held-out problems."""

from __future__ import annotations

import csv
import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import write_csv


def _read(path: Path) -> list[tuple[str, str]]:
    with open(path, encoding="utf-8", newline="") as handle:
        return [tuple(row) for row in list(csv.reader(handle))[1:]]


# --- bench/ood.py: held-out intents -------------------------------------------------------------------

INTENT_NAMES = [f"intent{i:02d}" for i in range(20)]  # sorted: every 8th is intent00, intent08, intent16


def _intent_rows(kind: str, per_intent: int) -> list[tuple[str, str]]:
    return [(f"{kind} text {i} of {name}", name) for name in INTENT_NAMES for i in range(per_intent)]


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """bench.ood.splits writes its CSVs under tempfile's folder: here, tmp_path."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "scratch"))
    (tmp_path / "scratch").mkdir()
    return tmp_path


def test_held_out_intents_are_every_eighth_alphabetically():
    from bench.ood import held_out_intents

    labels = list(reversed(INTENT_NAMES)) * 2  # the order of the file does not matter
    assert held_out_intents(labels, 10) == {"intent00", "intent08", "intent16"}
    assert held_out_intents(labels, 2) == {"intent00", "intent08"}


def test_ood_split_without_a_validation_file_keeps_held_out_intents_out_of_training(scratch):
    from bench.ood import splits

    folder = scratch / "banking77"
    folder.mkdir()
    train_rows, test_rows = _intent_rows("train", 12), _intent_rows("test", 3)
    write_csv(folder / "train.csv", train_rows)
    write_csv(folder / "test.csv", test_rows)
    train_path, valid_path, test_path, held = splits("banking77", folder)
    assert held == {"intent00", "intent08", "intent16"}
    assert test_path == folder / "test.csv"  # the official test file, untouched
    train, valid = _read(train_path), _read(valid_path)

    assert not {label for _, label in train} & held  # no held-out intent is trained on
    assert {label for _, label in train} == set(INTENT_NAMES) - held
    out_of_scope = [row for row in valid if row[1] in held]
    in_scope = [row for row in valid if row[1] not in held]
    # validation: 10 % (here 1 of 12) of each training intent, plus half the held-out intents' texts
    assert sorted(label for _, label in in_scope) == sorted(set(INTENT_NAMES) - held)
    assert len(out_of_scope) == 3 * 12 // 2 and {label for _, label in out_of_scope} <= held
    assert len(train) == 17 * 11
    # no text in two splits, and every row from the files it claims
    texts = [{t for t, _ in rows} for rows in (train, valid, test_rows)]
    assert not texts[0] & texts[1] and not texts[0] & texts[2] and not texts[1] & texts[2]
    assert set(train) | set(valid) <= set(train_rows)
    # deterministic: the same files again
    again = splits("banking77", folder)
    assert (_read(again[0]), _read(again[1]), again[3]) == (train, valid, held)


def test_ood_split_with_a_validation_file_takes_it_whole(scratch):
    from bench.ood import splits

    folder = scratch / "hwu64"
    folder.mkdir()
    write_csv(folder / "train.csv", _intent_rows("train", 4))
    val_rows = _intent_rows("val", 2)
    write_csv(folder / "val.csv", val_rows)
    write_csv(folder / "test.csv", _intent_rows("test", 2))
    train_path, valid_path, _, held = splits("hwu64", folder)
    assert held == {"intent00", "intent08", "intent16"}  # 8 asked for, 3 of 20 intents are every 8th
    train, valid = _read(train_path), _read(valid_path)
    assert not {label for _, label in train} & held and len(train) == 17 * 4
    assert sorted(valid) == sorted(val_rows)  # in-scope texts and the held-out intents' texts, as given
    assert not {t for t, _ in train} & {t for t, _ in valid}
    assert _read(splits("hwu64", folder)[0]) == train


def test_ood_none_rows_are_the_held_out_texts_validation_does_not_hold_and_never_test_texts(scratch):
    from bench.ood import NONE_LABEL, splits

    folder = scratch / "banking77"
    folder.mkdir()
    write_csv(folder / "train.csv", _intent_rows("train", 12))
    write_csv(folder / "test.csv", _intent_rows("test", 3))
    plain_train, plain_valid, _, held = splits("banking77", folder)
    train_path, valid_path, _, _ = splits("banking77", folder, none_rows=True)
    train, valid = _read(train_path), _read(valid_path)
    assert valid == _read(plain_valid)  # validation is the same with or without the lever
    none = [text for text, label in train if label == NONE_LABEL]
    held_texts = {t for t, label in _intent_rows("train", 12) if label in held}
    assert len(none) == 3 * 12 - 3 * 12 // 2 and set(none) <= held_texts  # the other half
    assert not set(none) & {t for t, _ in valid}
    assert [row for row in train if row[1] != NONE_LABEL] == _read(plain_train)


def test_ood_rows_of_several_seeds_are_their_mean_with_the_auroc_spread():
    from bench.ood import mean_rows

    def seed(auroc, picked):
        return [{"dataset": "d", "system": "d: scratch -- knn", "score": "knn", "auto_pick": picked,
                 "test_auroc": auroc, "in_scope_accuracy": 0.9, "meets_target": auroc > 0.94, "train_s": 10.0}]

    (row,) = mean_rows([seed(0.9, False), seed(0.96, True), seed(0.93, False)])
    assert row["test_auroc"] == pytest.approx(0.93) and row["test_auroc_sd"] == pytest.approx(0.03)
    assert row["system"] == "d: scratch -- knn (auto's pick)" and row["auto_picks"] == 1
    assert row["seeds"] == 3 and row["meets_target"] is False and row["in_scope_accuracy"] == pytest.approx(0.9)


def test_ood_rows_file_keeps_each_run_and_a_rerun_trains_only_the_missing_ones(tmp_path, monkeypatch, capsys):
    """``--rows``: each (dataset, system, seed) run is appended as it ends; a rerun with more seeds
    trains only the new ones; ``--table-only`` trains nothing and averages the seeds the file has."""
    import sys

    from bench import ood

    trained = []

    def fake_run(name, system, minutes, seed, recall):
        trained.append((name, system, seed))
        return [{"dataset": name, "system": f"{name}: {system} -- knn", "score": "knn", "auto_pick": True,
                 "test_auroc": 0.9 + seed / 100, "meets_target": False, "train_s": 1.0,
                 "run": ood.run_key(name, system, seed)}]

    monkeypatch.setattr(ood, "run", fake_run)
    rows = tmp_path / "rows.jsonl"
    argv = ["bench.ood", "--datasets", "banking77", "--systems", "minilm+none", "--rows", str(rows), "--no-record"]
    for extra in (["--seeds", "1"], ["--seeds", "2"], ["--seeds", "3", "--table-only"]):
        monkeypatch.setattr(sys, "argv", [*argv, *extra])
        capsys.readouterr()
        ood.main()
    assert trained == [("banking77", "minilm+none", 0), ("banking77", "minilm+none", 1)]
    assert len(rows.read_text(encoding="utf-8").splitlines()) == 2
    table = capsys.readouterr().out
    assert "| banking77: minilm+none -- knn (auto's pick) | knn |" in table and "| 0.9050 |" in table
    assert "2 seed(s) (the seeds column)" in table


# --- bench/en_ta_levers.py: whole documents held out ---------------------------------------------------


def _tico(root: Path, documents: int = 60, tatoeba: int = 40) -> dict[str, int]:
    """A TICO-19-like pair file with its metadata (the document: a URL, or a tuid prefix where the
    URL is empty) and a Tatoeba file; ``{document: pairs}``."""
    rng = np.random.default_rng(3)
    sizes = {f"https://example.org/doc{d}" if d % 3 else f"PubMed_{d}": int(rng.integers(2, 25))
             for d in range(documents)}
    (root / "en-ta-tico19").mkdir(parents=True)
    (root / "en-ta-tatoeba").mkdir()
    pairs, meta = [], ["line\ttuid\tsource_url"]
    for document, size in sizes.items():
        for i in range(size):
            pairs.append(f"{document} sentence {i}\tதமிழ் {len(pairs)}")
            url = "" if document.startswith("PubMed") else document
            meta.append(f"{len(pairs)}\t{document if not url else 'tuid'}:{i}\t{url}")
    (root / "en-ta-tico19" / "en-ta.tsv").write_text("\n".join(pairs) + "\n", encoding="utf-8")
    (root / "en-ta-tico19" / "en-ta.meta.tsv").write_text("\n".join(meta) + "\n", encoding="utf-8")
    (root / "en-ta-tatoeba" / "en-ta.tsv").write_text(
        "".join(f"tatoeba {i}\tடடோயெபா {i}\n" for i in range(tatoeba)), encoding="utf-8")
    return sizes


def _document(pair) -> str | None:
    return pair.source.split(" sentence ")[0] if " sentence " in pair.source else None


def test_en_ta_levers_split_holds_out_whole_documents(tmp_path, monkeypatch):
    import bench.en_ta_levers as levers

    sizes = _tico(tmp_path)
    monkeypatch.setattr(levers, "require_shared_data", lambda *parts: tmp_path.joinpath(*parts))
    train, valid, test, test_documents = levers.split()
    total = sum(sizes.values())
    docs = [{_document(p) for p in part} - {None} for part in (train, valid, test)]
    assert not docs[0] & docs[1] and not docs[0] & docs[2] and not docs[1] & docs[2]  # no document on two sides
    assert docs[2] == set(test_documents)
    for part, documents in zip((valid, test), docs[1:], strict=True):  # whole documents, every pair of each
        assert len(part) == sum(sizes[d] for d in documents)
    # sizes: 15 % of the pairs for test, about 150 for validation, the rest and Tatoeba for training
    want = round(0.15 * total)
    assert want <= len(test) < 2 * want and 150 <= len(valid) < 300
    assert len(train) == total - len(valid) - len(test) + 40
    assert sum(_document(p) is None for p in train) == 40 and all(_document(p) for p in valid + test)
    assert len({p.source for p in train + valid + test}) == total + 40  # every pair once
    assert levers.split() == (train, valid, test, test_documents)  # deterministic

    small = levers.split(limit=100)
    assert [len(part) for part in small[:3]] == [100, 5, 10]
    assert not {_document(p) for p in small[0]} & {_document(p) for p in small[1] + small[2]}


# --- bench/baselines.py: the tuned linear baseline chooses on validation only --------------------------


def test_tuned_linear_baseline_chooses_on_valid_and_refits_on_train_and_valid(monkeypatch):
    """A stand-in vectorizer and model record what each fit and prediction sees: one setting is
    right on every validation text, another on every test text. The valid one is chosen, test is
    only predicted once, after the choice, and the final fit sees training + validation texts."""
    from sklearn.base import BaseEstimator, ClassifierMixin, TransformerMixin

    import bench.baselines as baselines

    seen = {"fit": [], "predict": []}

    class Vectorizer(TransformerMixin, BaseEstimator):
        def __init__(self, analyzer="word", ngrams=(1, 1)):
            self.analyzer, self.ngrams = analyzer, ngrams

        def fit(self, texts, labels=None):
            seen["fit"].append(("vectorizer", list(texts)))
            self.fitted_ = True
            return self

        def transform(self, texts):
            return np.array([[self.analyzer, text] for text in texts], dtype=object)

    class Model(ClassifierMixin, BaseEstimator):
        def __init__(self, model="lr", c=1.0):
            self.model, self.c = model, c

        def fit(self, x, labels):
            seen["fit"].append(("model", [row[1] for row in x], list(labels)))
            self.fitted_ = True
            return self

        def predict(self, x):
            seen["predict"].append([row[1] for row in x])
            setting = (x[0][0], self.model, self.c)
            answer = {("char_wb", "svm", 0.3): "valid's", ("word", "lr", 30.0): "test's"}.get(setting, "neither")
            return np.array([answer] * len(x))

    monkeypatch.setattr(baselines, "_vectorizer", Vectorizer)
    monkeypatch.setattr(baselines, "_linear_model", Model)
    monkeypatch.setattr(baselines, "TUNED_JOBS", 1)  # the grid in this process, where the stand-ins are
    train = ([f"train {i}" for i in range(6)], ["x"] * 6)
    valid = ([f"valid {i}" for i in range(4)], ["valid's"] * 4)
    test = ([f"test {i}" for i in range(3)], ["test's"] * 3)
    row = baselines.tuned_linear_baseline(train, valid, test)

    assert row["chosen"] == "char 2-5 grams, linear SVM, C=0.3" and row["valid_accuracy"] == 1.0
    assert row["accuracy"] == 0.0  # test would have preferred another setting: it was not asked
    grid = sum(len(cs) for cs in baselines.TUNED_C.values()) * len(baselines.TUNED_FEATURES)
    assert seen["predict"] == [valid[0]] * grid + [test[0]]  # validation for every choice, test once at the end
    fits = [fit for fit in seen["fit"] if fit[0] == "model"]
    assert all(fit[1:] == (train[0], train[1]) for fit in fits[:-1]) and len(fits) == grid + 1
    assert fits[-1][1:] == (train[0] + valid[0], train[1] + valid[1])  # refitted on training + validation
    assert not any(text in fit[1] for fit in seen["fit"] for text in test[0])  # no fit ever saw a test text


def test_tuned_linear_baseline_runs_on_real_features():
    from bench.baselines import tuned_linear_baseline

    words = {"a": "refund invoice charge", "b": "laptop screen boot"}
    train, valid, test = (([f"{words[lb]} {lb}{i + offset} please" for i in range(n) for lb in "ab"],
                           [lb for _ in range(n) for lb in "ab"]) for n, offset in ((10, 0), (4, 100), (4, 200)))
    row = tuned_linear_baseline(train, valid, test)
    assert row["accuracy"] == 1.0 and row["valid_accuracy"] == 1.0 and row["macro_f1"] == 1.0
    assert row["chosen"].split(", ")[0] in ("word 1-2 grams", "char 2-5 grams")


# --- bench/arithmetic_long.py: problems drawn afresh from the held-out slice -------------------------------


def test_arithmetic_long_scores_fresh_held_out_problems_never_trained_on():
    from bench.arithmetic_long import SCORE_SEED
    from kformer.config import make_config
    from kformer.tasks import arithmetic
    from kformer.tasks.arithmetic.train import HELD_OUT_SEED

    assert SCORE_SEED != HELD_OUT_SEED
    config = make_config(arithmetic.ArithmeticConfig, "arithmetic", "arithmetic-long", {"digits": 40})
    fmt = config.answer_format()
    for length in (2, 3, 5, 10, 20, 30, 40):
        scored = fmt.length_problems(length, 50, seed=SCORE_SEED)
        assert scored and fmt.is_held_out(*map(list, zip(*scored, strict=True))).all()  # the held-out slice only
        assert all(len(str(a)) == len(str(b)) == length for a, _, b in scored)
        if length >= 5:  # a slice far larger than the draw: other problems than a training run's by_length
            assert not set(scored) & set(fmt.length_problems(length, 50, seed=HELD_OUT_SEED))
    # ... and the training stream never holds a problem of that slice
    rng = np.random.default_rng(0)
    a, ops, b = fmt.sample_training(rng, 20_000)
    assert not fmt.is_held_out(list(a), list(ops), list(b)).any()


def test_arithmetic_long_train_and_score_uses_the_fresh_seed(monkeypatch):
    """train_and_score (training faked): the training run scores no lengths itself, and every
    length is scored on SCORE_SEED's draws, the target lengths with ``held_out`` problems."""
    import bench.arithmetic_long as bench_long

    calls = []

    class Trained:
        metrics = {"steps": 1}

    class Loaded:
        def score_lengths(self, lengths, per_length, *, seed):
            calls.append((list(lengths), per_length, seed))
            return {str(length): {"exact_match": 1.0, "n": per_length} for length in lengths}

    trained_with = []
    monkeypatch.setattr(bench_long.arithmetic, "train", lambda config, data, out: trained_with.append(config) or Trained())
    monkeypatch.setattr(bench_long.arithmetic, "load", lambda out: Loaded())
    result = bench_long.train_and_score("arithmetic-long", {"positions": "abacus"}, 0.1, 40, 30, 0,
                                        targets=(20, 30), held_out_others=5)
    (config,) = trained_with
    assert config.held_out_per_length == 0 and config.digits == 40 and config.positions == "abacus"
    assert calls == [([length], 30 if length in (20, 30) else 5, bench_long.SCORE_SEED) for length in range(1, 41)]
    assert list(result["by_length"]) == [str(length) for length in range(1, 41)]


def test_the_products_table_trains_the_recipe_and_the_direct_format_and_scores_3x3_to_7x7(monkeypatch):
    import bench.arithmetic_long as bench_long

    trained, scored = [], []

    class Trained:
        metrics = {"steps": 1, "train_seconds": 60.0, "exact_match": 1.0}

    class Loaded:
        def score_lengths(self, lengths, per_length, *, seed):
            scored.append((lengths[0], per_length))
            return {str(length): {"exact_match": 0.5, "n": per_length} for length in lengths}

    monkeypatch.setattr(bench_long.arithmetic, "train", lambda config, data, out: trained.append(config) or Trained())
    monkeypatch.setattr(bench_long.arithmetic, "load", lambda out: Loaded())
    rows = bench_long.product_rows(None, 40, 4, seeds=1)
    assert [c.source_style for c in trained] == ["long_multiplication", "op_columns"]
    assert all(c.ops == "*" and c.train_digits == 5 and c.digits == 7 and c.max_minutes == 10 for c in trained)
    assert scored[:7] == [(length, 40 if length in (3, 5) else 4) for length in range(1, 8)]
    assert [r["system"] for r in rows] == ["kformer multiplication, long multiplication (the recipe)",
                                           "kformer multiplication, the product written directly"]
    assert rows[0]["5"] == 0.5 and rows[0]["train_minutes"] == 1.0


# --- bench/en_ta_splits.py: TICO-19 by document, Joshua IPC by seg_id, every other corpus trains -------------


def _en_ta_corpora(root: Path) -> None:
    """Beside :func:`_tico`'s files: a Joshua IPC folder (seg_ids of 1-4 English variants of one
    Tamil sentence), a gzipped Bible holding a shouted copy of every TICO-19 source, and small
    NLPC-UoM (with a glossary) and TICO-19 term files."""
    import gzip

    rng = np.random.default_rng(5)
    pairs, meta = [], ["seg_id\torig_split\tref_index"]
    for segment in range(40):
        for variant in range(int(rng.integers(1, 5))):
            pairs.append(f"seg{segment} variant{variant}\tவாக்கியம் {segment}")
            meta.append(f"doc_{segment}\tdev\t{variant}")
    (root / "en-ta-joshua-ipc").mkdir()
    (root / "en-ta-joshua-ipc" / "en-ta.tsv").write_text("\n".join(pairs) + "\n", encoding="utf-8")
    (root / "en-ta-joshua-ipc" / "en-ta.meta.tsv").write_text("\n".join(meta) + "\n", encoding="utf-8")
    tico = (root / "en-ta-tico19" / "en-ta.tsv").read_text(encoding="utf-8").splitlines()
    bible = [f"{line.split(chr(9))[0].upper()}!\tவசனம் {i}" for i, line in enumerate(tico)]
    bible += [f"verse {i}\tவசனம் {i}" for i in range(30)]
    (root / "en-ta-bible").mkdir()
    with gzip.open(root / "en-ta-bible" / "en-ta.tsv.gz", "wt", encoding="utf-8") as handle:
        handle.write("\n".join(bible) + "\n")
    for folder, file, stem in (("en-ta-nlpc-uom", "en-ta.tsv", "circular"), ("en-ta-nlpc-uom", "glossary.tsv", "term"),
                               ("en-ta-tico19-terms", "en-ta.tsv", "covid term")):
        (root / folder).mkdir(exist_ok=True)
        (root / folder / file).write_text("".join(f"{stem} {i}\tசொல் {i}\n" for i in range(20)), encoding="utf-8")


def test_en_ta_split_keeps_held_out_sentences_out_of_training(tmp_path, monkeypatch):
    import bench.en_ta_splits as en_ta

    sizes = _tico(tmp_path)
    _en_ta_corpora(tmp_path)
    monkeypatch.setattr(en_ta, "IPC_TEST", 6)
    monkeypatch.setattr(en_ta, "IPC_VALID", 4)
    split = en_ta.split(data=lambda *parts: tmp_path.joinpath(*parts))
    assert {p.corpus for p in split.train} == set(en_ta.CORPORA)  # every corpus trains, each pair names its own
    held = [p for part in (*split.test.values(), *split.valid.values()) for p in part]
    assert not {en_ta.source_key(p.source) for p in held} & {en_ta.source_key(p.source) for p in split.train}
    # the Bible's shouted copies of held-out TICO-19 sources were removed, and counted; its others kept
    tico_held = len(split.test["tico"]) + len(split.valid["tico"])
    assert split.removed == {"en-ta-bible": tico_held}
    assert len(split.train_of(["en-ta-bible"])) == sum(sizes.values()) + 30 - tico_held
    # TICO-19: whole documents, none on two sides
    docs = [{_document(p) for p in part} for part in (split.train_of(["en-ta-tico19"]), split.test["tico"],
                                                       split.valid["tico"])]
    assert not docs[0] & docs[1] and not docs[0] & docs[2] and not docs[1] & docs[2]
    assert docs[1] == set(split.test_documents)
    # Joshua IPC: 6 test and 4 validation seg_ids, each scored once (its first variant); none of their pairs trains
    segment = lambda pair: pair.source.split()[0]  # noqa: E731
    test_ids, valid_ids = [segment(p) for p in split.test["ipc"]], [segment(p) for p in split.valid["ipc"]]
    assert len(set(test_ids)) == len(test_ids) == 6 and len(set(valid_ids)) == len(valid_ids) == 4
    assert all(p.source.endswith("variant0") for p in split.test["ipc"] + split.valid["ipc"])
    assert not {segment(p) for p in split.train_of(["en-ta-joshua-ipc"])} & set(test_ids + valid_ids)
    assert {p.corpus for p in split.valid_pairs()[:2]} == {"en-ta-tico19", "en-ta-joshua-ipc"}  # interleaved
    again = en_ta.split(data=lambda *parts: tmp_path.joinpath(*parts))
    assert (again.train, again.test, again.valid) == (split.train, split.test, split.valid)  # fixed seeds


def test_en_ta_split_writes_files_the_cli_reads_as_the_same_corpora(tmp_path, monkeypatch):
    import bench.en_ta_splits as en_ta
    from kformer.data.corpora import read_corpora
    from kformer.data.pairs import read_pairs

    data = tmp_path / "data"
    data.mkdir()
    _tico(data)
    _en_ta_corpora(data)
    monkeypatch.setattr(en_ta, "IPC_TEST", 6)
    monkeypatch.setattr(en_ta, "IPC_VALID", 4)
    split = en_ta.split(data=lambda *parts: data.joinpath(*parts))
    written = en_ta.write(split, tmp_path / "out")
    corpora = {corpus.name: pairs for corpus, pairs in read_corpora(tmp_path / "out" / "train")}
    assert set(corpora) == set(en_ta.CORPORA)  # each corpus under the name the bench gives it
    for name, pairs in corpora.items():
        assert [(p.source, p.target) for p in pairs] == [(p.source, p.target) for p in split.train_of([name])]
    tico = [(p.source, p.target) for p in read_pairs(tmp_path / "out" / "test-tico.tsv")]
    assert tico == [(p.source, p.target) for p in split.test["tico"]]
    assert written["test.tsv"] == len(split.test["tico"]) + 6 and written["valid.tsv"] == len(split.valid_pairs())
