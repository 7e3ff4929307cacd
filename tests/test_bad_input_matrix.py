"""The bad-input matrix (issue 11, part 1): every case states its input and expected outcome.

Invalid input is REFUSED: the CLI prints exactly one line ``kformer: error: ...`` (no traceback)
and exits with the error table's status; the Python API raises the typed exception naming the
``field``; the REST service answers the table's HTTP status with ``{"error", "field"}``; and no
``--out`` folder is created or changed. Unusual but valid input is HANDLED. Tiny models are
trained once per module (in-process); every CLI case runs in-process through ``kformer.cli.main``.
"""

from __future__ import annotations

import asyncio
import errno
import fcntl
import gzip
import json
import os
import shutil
from pathlib import Path

import pytest
from conftest import TICKET_QUEUES, cli, number_pairs, write_csv, write_tickets
from server_helpers import TINY_ARITHMETIC, TINY_CLASSIFIER

from kformer.errors import BadInput, CorruptModel, KformerError, ModelNotFound, Unsupported

CLASSIFY = {**TINY_CLASSIFIER, "epochs": 1}
ARITHMETIC = {**TINY_ARITHMETIC, "steps_per_epoch": 2, "held_out_size": 8}
UNUSUAL = {  # valid texts that must be handled (labelled Hardware in the training file)
    "emoji": "my laptop 😀🔥 screen is broken 👍🏽",
    "rtl": "laptop screen شاشة الحاسوب لا تعمل עברית",
    "tamil": "laptop screen திரை வேலை செய்யவில்லை",
    "combining": "laptop scre\u0301en cafe\u0301 n\u0303o boot",
    "nul": "laptop\x00 screen",
}
LONG_TEXT = " ".join(["laptop", "screen", "boot", "please"] * 12_500)  # 50,000 words


# --- helpers --------------------------------------------------------------------------------------


def refused(capsys, argv, status: int, words: str) -> str:
    """Run ``argv``; assert exit ``status`` and one clean error line holding ``words``."""
    code, _, err = cli(capsys, *argv)
    lines = [line for line in err.splitlines() if not line.startswith("kformer: warning:")]
    assert code == status, err
    assert len(lines) == 1 and lines[0].startswith("kformer: error: "), err
    assert "Traceback" not in err and "internal error" not in err
    assert words in lines[0], lines[0]
    return lines[0]


def snapshot(folder: Path) -> dict[str, bytes] | None:
    """Every file under ``folder`` with its bytes (None: no such folder)."""
    if not folder.exists():
        return None
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def unusual_csv(path: Path) -> Path:
    """Tickets plus every unusual-but-valid text, an empty text row and a 50,000-word text,
    written with a BOM and CRLF line ends."""
    write_tickets(path, 150, seed=5)
    lines = path.read_text(encoding="utf-8").splitlines()
    extra = [f'"{text}",Hardware' for text in UNUSUAL.values()] + [",Hardware", f"{LONG_TEXT},Hardware"]
    path.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(lines + extra + [""]).encode("utf-8"))
    return path


def ticket_rows(n: int = 12) -> list[tuple[str, str]]:
    labels = list(TICKET_QUEUES)
    return [(f"{TICKET_QUEUES[labels[i % 3]][i % 6]} problem number {i}", labels[i % 3]) for i in range(n)]


@pytest.fixture(scope="module")
def models(tmp_path_factory, eager_decoding):
    """A tiny classifier trained on the unusual file and a tiny 2-digit arithmetic model."""
    from kformer.tasks import arithmetic, classify

    root = tmp_path_factory.mktemp("matrix-models")
    data = unusual_csv(root / "unusual.csv")
    result = classify.train(CLASSIFY, data, root / "tickets")
    arithmetic.train(ARITHMETIC, None, root / "arith")
    return {"root": root, "data": data, "tickets": root / "tickets", "arith": root / "arith",
            "metrics": result.metrics}


@pytest.fixture
def good_csv(tmp_path) -> Path:
    return write_csv(tmp_path / "good.csv", ticket_rows())


# --- files (kformer train classify) ---------------------------------------------------------------

FILE_CASES = [  # (id, file name, bytes or None (missing) or "dir", exit, words in the message)
    ("missing", "nope.csv", None, 2, "does not exist"),
    ("directory", "folder", "dir", 2, "no label folders"),
    ("empty", "empty.csv", b"", 2, "is empty"),
    ("header-only", "header.csv", b"text,label\n", 2, "has no rows"),
    ("no-text-column", "cols.csv", b"body,label\nhi,a\n", 2, "columns found: body, label"),
    ("no-label-column", "cols.csv", b"text,category\nhi,a\n", 2, "columns found: text, category"),
    ("mixed-quoting", "mixed.csv", b'text,label\n"a "b" c,x\n\'d\',y\n"open,x\n', 2, "not a valid CSV"),
    ("undecodable-bytes", "bad.csv", b"text,label\nfine,a\nbad \xff here,b\n", 2, "line 3 is not valid UTF-8"),
    ("utf-16", "wide.csv", "text,label\nhi,a\n".encode("utf-16"), 2, "line 1 is not valid UTF-8"),
    ("truncated-gz", "t.csv.gz", gzip.compress(("text,label\n" + "".join(
        f"text {i} {i * 7919 % 104729},{'ab'[i % 2]}\n" for i in range(400))).encode())[:900], 2, "cannot read"),
    ("jsonl-bad-line", "bad.jsonl", b'{"text": "a", "label": "x"}\n{"text": "b",\n', 2, "line 2 is not valid JSON"),
    ("jsonl-not-object", "list.jsonl", b'{"text": "a", "label": "x"}\n[1, 2]\n', 2, "line 2 is not a JSON object"),
    ("label-seen-once", "once.csv", ("text,label\n" + "".join(f"t{i},{'ab'[i % 2]}\n" for i in range(8))
                                     + "lonely,c\n").encode(), 2, "label 'c' has fewer than 2 examples"),
    ("one-class", "one.csv", ("text,label\n" + "".join(f"t{i},a\n" for i in range(8))).encode(), 2, "single label"),
    ("10000-classes", "many.csv", ("text,label\n" + "".join(f"t{i},L{i // 2}\n" for i in range(20_000))).encode(),
     2, "at most 1,000"),
    ("all-texts-empty", "blank.csv", b"text,label\n,a\n  ,b\n", 2, "all 2 rows have an empty text or label"),
    ("unknown-type", "data.xlsx", b"PK", 2, "unknown file type"),
]


@pytest.mark.parametrize(("name", "content", "status", "words"), [c[1:] for c in FILE_CASES],
                         ids=[c[0] for c in FILE_CASES])
def test_train_refuses_bad_files_and_writes_nothing(capsys, tmp_path, name, content, status, words):
    path = tmp_path / name
    if content == "dir":
        path.mkdir()
    elif content is not None:
        path.write_bytes(content)
    out = tmp_path / "out"
    refused(capsys, ["train", "classify", "--data", path, "--out", out, "--quiet"], status, words)
    assert not out.exists()


def test_translate_pair_file_with_one_column(capsys, tmp_path):
    from kformer.tasks import translate

    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("one\tஒன்று\ntwo\n", encoding="utf-8")
    out = tmp_path / "out"
    refused(capsys, ["train", "translate", "--data", pairs, "--out", out, "--quiet"], 2, "line 2 has no tab")
    with pytest.raises(KformerError, match="line 2 has no tab"):
        translate.train({"epochs": 1}, pairs, out)
    assert not out.exists()


# --- settings -------------------------------------------------------------------------------------

SETTING_CASES = [  # (id, extra CLI arguments or a recipe body, exit, words)
    ("unknown-recipe-key", "[training]\nepochz = 3\n", 2, "unknown setting training.epochz"),
    ("recipe-wrong-type", "[training]\nepochs = 'three'\n", 2, "'three' must be a whole number"),
    ("recipe-wrong-section", "[model]\nepochs = 3\n", 2, "belongs in [training]"),
    ("recipe-not-toml", "epochs = = 3", 2, "not valid TOML"),
    ("flag-wrong-type", ["--epochs", "three"], 2, "invalid int value: 'three'"),
    ("unknown-flag", ["--epochz", "3"], 2, "unrecognized arguments"),
    ("negative-size", ["--max-length", "-3"], 2, "--max-length must be at least 1, got -3"),
    ("zero-batch", ["--batch-size", "0"], 2, "--batch-size must be at least 1, got 0"),
    ("zero-vocab", ["--vocab-size", "0"], 2, "--vocab-size must be at least 1"),
    ("zero-epochs", ["--epochs", "0"], 2, "--epochs must be at least 1"),
    ("max-minutes-0", ["--max-minutes", "0"], 2, "--max-minutes must be above 0"),
    ("negative-rate", ["--learning-rate", "-1"], 2, "--learning-rate must be above 0"),
]


@pytest.mark.parametrize(("extra", "status", "words"), [c[1:] for c in SETTING_CASES], ids=[c[0] for c in SETTING_CASES])
def test_train_refuses_bad_settings(capsys, tmp_path, good_csv, extra, status, words):
    if isinstance(extra, str):
        (tmp_path / "r.toml").write_text(extra, encoding="utf-8")
        extra = ["--recipe", tmp_path / "r.toml"]
    out = tmp_path / "out"
    refused(capsys, ["train", "classify", "--data", good_csv, "--out", out, "--quiet", *extra], status, words)
    assert not out.exists()


API_CASES = [  # (id, task, settings, data, exception, field)
    ("negative-epochs", "classify", {"epochs": -1}, "good", BadInput, "epochs"),
    ("unknown-key", "classify", {"epochz": 1}, "good", BadInput, "epochz"),
    ("wrong-type", "classify", {"epochs": "3"}, "good", BadInput, "epochs"),
    ("max-minutes-0", "classify", {"max_minutes": 0}, "good", BadInput, "max_minutes"),
    ("one-class-in-memory", "classify", {}, (["a b", "c d"], ["x", "x"]), BadInput, "data"),
    ("texts-labels-mismatch", "classify", {}, (["a", "b"], ["x"]), BadInput, "data"),
    ("text-not-string", "classify", {}, (["a", 3], ["x", "y"]), BadInput, "data.texts[1]"),
    ("arith-zero-batch", "arithmetic", {"batch_size": 0}, None, BadInput, "batch_size"),
    ("arith-bad-ops", "arithmetic", {"ops": "/"}, None, BadInput, "ops"),
    ("arith-repeated-ops", "arithmetic", {"ops": "**"}, None, BadInput, "ops"),
    ("translate-zero-epochs", "translate", {"epochs": 0}, "pairs", BadInput, "epochs"),
]


@pytest.mark.parametrize(("task", "settings", "data", "error", "field"), [c[1:] for c in API_CASES],
                         ids=[c[0] for c in API_CASES])
def test_python_api_raises_the_typed_error_with_its_field(tmp_path, good_csv, task, settings, data, error, field):
    from kformer.tasks import task_module

    data = {"good": good_csv, "pairs": number_pairs(20, seed=1)}.get(data, data) if isinstance(data, str) else data
    out = tmp_path / "out"
    with pytest.raises(error) as raised:
        task_module(task).train(settings, data, out)
    assert type(raised.value) is error and raised.value.field == field
    assert "\n" not in str(raised.value)
    assert not out.exists()


def test_out_holding_other_files_is_refused_not_overwritten(capsys, tmp_path, good_csv):
    from kformer.tasks import classify

    out = tmp_path / "thesis"
    out.mkdir()
    (out / "chapter1.tex").write_text("precious", encoding="utf-8")
    before = snapshot(out)
    refused(capsys, ["train", "classify", "--data", good_csv, "--out", out, "--quiet"], 2,
            "not a kformer model (chapter1.tex)")
    with pytest.raises(BadInput) as raised:
        classify.train(CLASSIFY, good_csv, out)
    assert raised.value.field == "out" and "pass a new or empty folder as out" in str(raised.value)
    (tmp_path / "file").write_text("x", encoding="utf-8")
    refused(capsys, ["train", "classify", "--data", good_csv, "--out", tmp_path / "file", "--quiet"], 2, "is a file")
    assert snapshot(out) == before


@pytest.mark.parametrize(("code", "words"), [(errno.EROFS, "the disk is read-only"), (errno.ENOSPC, "the disk is full")],
                         ids=["read-only", "disk-full"])
def test_unwritable_out_is_one_line_naming_the_file(capsys, tmp_path, good_csv, monkeypatch, code, words):
    def refuse(src, dst):
        raise OSError(code, os.strerror(code), str(dst))

    monkeypatch.setattr(os, "replace", refuse)
    out = tmp_path / "out"
    line = refused(capsys, ["train", "classify", "--data", good_csv, "--out", out, "--quiet"], 2, words)
    assert f"cannot write {out / 'training' / 'state.json'}" in line and "--out" in line
    assert not out.exists()


def test_disk_full_while_replacing_a_model_leaves_it_as_it_was(tmp_path, models, monkeypatch):
    from kformer.tasks import classify

    out = tmp_path / "tickets"
    shutil.copytree(models["tickets"], out)
    before = {k: v for k, v in snapshot(out).items() if not k.startswith("training")}
    real_replace = os.replace

    failed = []

    def full_at_the_manifest(src, dst):  # the last rename of the folder swap: all before it rolled back
        if Path(dst) == out / "kformer.json" and not failed:
            failed.append(dst)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dst))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", full_at_the_manifest)
    with pytest.raises(BadInput) as raised:
        classify.train(CLASSIFY, models["data"], out)
    assert raised.value.field == "out" and "the disk is full" in str(raised.value) and failed
    monkeypatch.undo()
    assert {k: v for k, v in snapshot(out).items() if not k.startswith("training")} == before
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging or parked debris
    classify.load(out)


def test_a_second_training_into_the_same_folder_is_refused(capsys, tmp_path, models, good_csv):
    from kformer.tasks.training_folder import training_folder

    out = tmp_path / "tickets"
    shutil.copytree(models["tickets"], out)
    lock = out / "training" / ".lock"
    with open(lock, "w") as held:  # another process training into out
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        held.write("4242\n")
        held.flush()
        before = snapshot(out)
        refused(capsys, ["train", "classify", "--data", good_csv, "--out", out, "--quiet"], 2,
                f"{out} is being written by another kformer training (process 4242)")
        assert snapshot(out) == before
    lock.write_text("999999\n")  # a stale lock of a dead process: not held, so not in the way
    with training_folder(out, resume=False) as state_dir:
        assert lock.read_text().strip() == str(os.getpid()) and state_dir == out / "training"


def test_vocabulary_larger_than_the_corpus_is_capped_and_said(models):
    vocabulary = models["metrics"]["vocabulary"]
    assert vocabulary["requested"] == CLASSIFY["vocab_size"] and vocabulary["size"] < CLASSIFY["vocab_size"]
    assert "capped" in vocabulary["note"]
    assert len((models["tickets"] / "vocab.txt").read_text(encoding="utf-8").split("\n")) - 1 == vocabulary["size"]


# --- unusual but valid text is handled ------------------------------------------------------------


def test_unusual_training_file_is_handled(models):
    from kformer.tasks import classify

    metrics = models["metrics"]
    assert metrics["splits"]["dropped_empty"] == 1  # the empty text row, counted
    assert metrics["splits"]["train"] + metrics["splits"]["valid"] == 150 + len(UNUSUAL) + 1
    model = classify.load(models["tickets"])
    assert model.manifest["text_column"] == "text"  # the BOM did not stick to the header
    maps = model.attention_maps(LONG_TEXT)
    assert maps.maps["encoder"].shape[-1] <= CLASSIFY["max_length"]  # the 50,000 words were truncated


def test_unusual_texts_through_cli_api_and_rest(capsys, tmp_path, models):
    from test_server_api import serving

    from kformer.tasks import classify

    texts = [*UNUSUAL.values(), LONG_TEXT, ""]
    data = tmp_path / "predict.csv"
    data.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(["text", *(f'"{t}"' for t in texts)]).encode("utf-8"))
    code, out, err = cli(capsys, "predict", models["tickets"], "--data", data)
    assert code == 0 and "Traceback" not in err
    rows = [json.loads(line) for line in out.splitlines()]
    model = classify.load(models["tickets"])
    assert [r["text"] for r in rows] == [" ".join(t.split()) if "\r" in t else t.strip() for t in texts]
    assert all(r["label"] in model.labels for r in rows)  # the empty text too: it still gets an answer
    library = model.predict(texts)
    assert [r["label"] for r in rows] == [r["label"] for r in library]

    async def rest():
        async with serving({"tickets": models["tickets"]}) as (client, _):
            answer = await client.post("/v1/models/tickets:predict", json={"instances": list(UNUSUAL.values())})
            assert answer.status_code == 200
            assert [p["label"] for p in answer.json()["predictions"]] == [r["label"] for r in library[: len(UNUSUAL)]]
            too_long = await client.post("/v1/models/tickets:predict", json={"instances": ["ok", LONG_TEXT]})
            assert too_long.status_code == 422 and too_long.json()["field"] == "instances[1]"
            empty = await client.post("/v1/models/tickets:predict", json={"instances": [" "]})
            assert empty.status_code == 422 and empty.json()["field"] == "instances[0]"

    asyncio.run(rest())


# --- models ---------------------------------------------------------------------------------------


def _damage(folder: Path, how: str, root: Path) -> None:
    manifest_path = folder / "kformer.json"
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    if how == "newer-format":
        manifest["format_version"] = 99
    elif how == "missing-key":
        del manifest["labels"]
    elif how == "not-json":
        manifest_path.write_text("{ half a manifest", encoding="utf-8")
        return
    elif how == "truncated-model":
        model = folder / "model.keras"
        model.write_bytes(model.read_bytes()[: model.stat().st_size // 2])
        return
    elif how == "no-manifest":
        manifest_path.unlink()
        return
    elif how == "other-task":
        shutil.rmtree(folder)
        shutil.copytree(root / "arith", folder)
        return
    manifest_path.write_text(json.dumps(manifest), encoding="utf-8")


MODEL_CASES = [  # (id, damage, exit, exception, words)
    ("missing-folder", "gone", 3, ModelNotFound, "is not a folder"),
    ("not-a-model-folder", "no-manifest", 3, ModelNotFound, "not a kformer model folder"),
    ("folder-of-another-task", "other-task", 2, BadInput, "holds a 'arithmetic' model, not a 'classify' one"),
    ("newer-format-version", "newer-format", 5, Unsupported, "written by a newer kformer"),
    ("manifest-missing-key", "missing-key", 4, CorruptModel, "is missing labels"),
    ("manifest-not-json", "not-json", 4, CorruptModel, "is corrupt"),
    ("truncated-model-keras", "truncated-model", 4, CorruptModel, "cannot load"),
]


@pytest.mark.parametrize(("how", "status", "error", "words"), [c[1:] for c in MODEL_CASES], ids=[c[0] for c in MODEL_CASES])
def test_damaged_model_folders(capsys, tmp_path, models, how, status, error, words):
    from kformer.tasks import classify

    folder = tmp_path / "model"
    if how != "gone":
        shutil.copytree(models["tickets"], folder)
        _damage(folder, how, models["root"])
    before = snapshot(folder)
    refused(capsys, ["predict", folder, "my laptop"], status, words)
    with pytest.raises(error) as raised:
        classify.load(folder)
    assert type(raised.value) is error and raised.value.field == "model_dir"
    assert snapshot(folder) == before


def test_a_model_file_carrying_code_is_refused_and_its_code_never_runs(capsys, tmp_path, models):
    import keras

    import kformer

    marker = tmp_path / "pwned"
    payload = eval(f"lambda x: (open({str(marker)!r}, 'w').write('ran'), x)[1]")  # noqa: S307
    inputs = keras.Input((4,))
    evil = keras.Model(inputs, keras.layers.Dense(3, activation="softmax")(keras.layers.Lambda(payload)(inputs)))
    marker.unlink()  # building the model ran the payload once; from here it must not run
    folder = tmp_path / "evil"
    folder.mkdir()
    evil.save(folder / "model.keras")
    (folder / "kformer.json").write_text(json.dumps({"format_version": 1, "task": "classify", "model_file": "model.keras",
                                                     "labels": ["a", "b", "c"], "max_length": 4}), encoding="utf-8")
    with pytest.raises(CorruptModel) as raised:
        kformer.load(folder)
    assert raised.value.field == "model_dir"
    refused(capsys, ["predict", folder, "hello"], 4, "cannot load")
    assert not marker.exists()
    keras.saving.load_model(folder / "model.keras", safe_mode=False)  # the file's code does run when allowed
    assert marker.read_text() == "ran"


# --- arithmetic inputs ----------------------------------------------------------------------------

ARITHMETIC_CASES = [  # (id, problem, words of the library and CLI message)
    ("letter-in-number", "12a4+1", "is not a problem like"),
    ("beyond-trained-digits", "999+1", "outside what this model learned (2-digit operands"),
    ("double-operator", "1++2", "is not a problem like"),
    ("unknown-operator", "12/3", "is not a problem like"),
    ("product-for-a-sum-model", "12*3", "outside what this model learned (2-digit operands at most, operators '+-')"),
    ("empty", "", "is not a problem like"),
    ("whitespace", "   ", "is not a problem like"),
]


@pytest.mark.parametrize(("problem", "words"), [c[1:] for c in ARITHMETIC_CASES], ids=[c[0] for c in ARITHMETIC_CASES])
def test_bad_arithmetic_problems(capsys, tmp_path, models, problem, words):
    from kformer.tasks import arithmetic

    model = arithmetic.load(models["arith"])
    with pytest.raises(BadInput) as raised:
        model.solve(["12+34", problem])
    assert raised.value.field == "problems[1]" and words in str(raised.value)
    out = tmp_path / "pictures"
    refused(capsys, ["attention", models["arith"], problem, "--out", out], 2, words)
    problems = tmp_path / "problems.txt"
    problems.write_text(f"12+34=46\n{problem}=5\n", encoding="utf-8")
    line = refused(capsys, ["evaluate", models["arith"], "--data", problems, "--out", out], 2, words)
    assert f"{problems}, line 2: " in line
    assert not out.exists()


def test_evaluate_digits_is_for_arithmetic_models_and_their_lengths(capsys, models, tmp_path):
    refused(capsys, ["evaluate", models["tickets"], "--digits", "3"], 2, "--digits is for arithmetic models")
    refused(capsys, ["evaluate", models["tickets"]], 2, "--data FILE is required")
    refused(capsys, ["evaluate", models["arith"], "--digits", "3"], 2, "--digits must be between 1 and 2")
    problems = tmp_path / "problems.txt"
    problems.write_text("12+34=46\n", encoding="utf-8")
    refused(capsys, ["evaluate", models["arith"], "--digits", "2", "--data", problems], 2, "not both")


def test_bad_arithmetic_problems_over_rest(models):
    from test_server_api import serving

    async def rest():
        async with serving({"arith": models["arith"]}) as (client, _):
            for _, problem, words in ARITHMETIC_CASES:
                answer = await client.post("/v1/models/arith:predict", json={"instances": ["12+34", problem]})
                assert answer.status_code == 422 and answer.json()["field"] == "instances[1]", problem
                assert problem.strip() == "" or words in answer.json()["error"]
            assert (await client.post("/v1/models/arith:predict", json={"instances": ["12+34"]})).status_code == 200

    asyncio.run(rest())


# --- streaming: predict --data and evaluate hold one chunk at a time ---------------------------------


def test_predict_and_evaluate_stream_a_file_in_chunks(capsys, tmp_path, models, monkeypatch):
    import kformer.cli.classify as classify_cli
    import kformer.data.readers as readers
    from kformer.tasks import classify

    rows = ticket_rows(40)
    data = write_csv(tmp_path / "big.csv", rows)
    model = classify.load(models["tickets"])
    whole = model.predict([t for t, _ in rows])
    expected_scores = model.evaluate(([t for t, _ in rows], [lab for _, lab in rows]))
    held: list[int] = []
    real_scored = classify.Classifier.scored  # one pass of the network (predict, and evaluate's probabilities)

    def counting(self, texts, batch_size=64):
        held.append(len(texts))
        return real_scored(self, texts, batch_size=batch_size)

    monkeypatch.setattr(classify.Classifier, "scored", counting)
    monkeypatch.setattr(classify_cli, "PREDICT_CHUNK", 10)
    code, out, _ = cli(capsys, "predict", models["tickets"], "--data", data)
    assert code == 0 and held == [10, 10, 10, 10]  # never more than a chunk of rows at once
    assert [json.loads(line)["label"] for line in out.splitlines()] == [r["label"] for r in whole]

    held.clear()
    monkeypatch.setattr(readers, "CHUNK_ROWS", 10)
    code, out, _ = cli(capsys, "evaluate", models["tickets"], "--data", data, "--json", "--out", tmp_path / "eval")
    assert code == 0 and held == [10, 10, 10, 10]
    scores = json.loads(out)
    assert scores["accuracy"] == pytest.approx(expected_scores["accuracy"], abs=1e-9) and scores["n"] == 40
    assert scores["confusion"] == expected_scores["confusion"]
    held.clear()
    assert model.evaluate(data, limit=15)["n"] == 15 and held == [10, 5]


@pytest.mark.slow
def test_the_readers_are_lazy(tmp_path):
    from kformer.data.readers import iter_labelled, iter_texts

    path = tmp_path / "late.csv"
    rows = 60_000  # pandas reads ahead a block of 256 KiB: the bad line lies well beyond the first
    path.write_bytes(b"text,label\n" + b"".join(b"fine %d,a\n" % i for i in range(rows)) + b"broken \xff,b\n")
    chunks = iter_texts(path, chunk_rows=10)
    assert next(chunks) == [f"fine {i}" for i in range(10)]  # read before the bad line is reached
    with pytest.raises(KformerError, match=f"line {rows + 2} is not valid UTF-8"):
        list(chunks)
    jsonl = tmp_path / "late.jsonl"
    jsonl.write_text("".join(json.dumps({"text": f"t{i}", "label": "a"}) + "\n" for i in range(25)) + "{oops\n")
    labelled = iter_labelled(jsonl, chunk_rows=10)
    assert [len(next(labelled)) for _ in range(2)] == [10, 10]
    with pytest.raises(KformerError, match="line 26 is not valid JSON"):
        list(labelled)
