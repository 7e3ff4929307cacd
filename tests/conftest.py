"""Shared test fixtures (keep small; helpers append their own below a header).

Two loops: ``make test-fast`` runs ``pytest -m "not slow"`` -- unit tests, no training runs, in
under two minutes -- and ``make test`` runs everything. A test is ``slow`` when it trains or
compiles a model: marked ``@pytest.mark.slow``, or using a fixture of :data:`TRAINED_FIXTURES`
(a model trained for several tests), which marks it here.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import kformer

kformer.setup()  # what the `kformer` command does at start-up: backend, TensorFlow's logs and threads

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
# fixtures that train models for the tests that use them (each module names its own)
TRAINED_FIXTURES = {"tiny_models", "trained", "readme_run", "runs", "folders", "tickets", "classifier", "translator",
                    "served", "real_models", "models", "wide_folder", "saved", "ood_folder", "tiny"}


# The test files of most worker-seconds (`make test` with --durations=0, 2026-12-06), longest first.
# pytest-xdist hands its workers one file at a time in collection order (the Makefile turns off its
# reordering by test count), so these start first and the two workers end together: ordered by
# count, the long files with few tests came last, one worker running them while the other idled.
SLOWEST_FIRST = ("test_docs.py", "test_distributed.py", "test_elastic.py", "test_crash_resume.py", "test_ood_score.py",
                 "test_pretrained.py", "test_export.py", "test_classify_training.py", "test_generation.py",
                 "test_server_api.py", "test_translate_retrieval.py", "test_classify_cli.py", "test_translate_cli.py",
                 "test_tasks_translate.py", "test_logs.py")


def pytest_collection_modifyitems(items):
    """Mark ``slow`` every test that uses a model trained by a fixture; put the files of
    :data:`SLOWEST_FIRST` first, in its order (the rest after them, as collected)."""
    for item in items:
        if TRAINED_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    rank = {name: place for place, name in enumerate(SLOWEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's tests keep their order


def jax_job_env(cache: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment of a data-parallel job's subprocess (tests/test_distributed.py,
    tests/test_elastic.py): this one without KERAS_BACKEND and XLA_FLAGS (the job sets its own),
    unbuffered output, and ``extra``. Models this small spend more on XLA's optimising passes than
    they save (half such a job's CPU time): every run those tests compare compiles without them.
    ``cache``: a folder (the test's own) where the job's processes keep every XLA compilation, so
    a process started after another (a restarted group) loads the programs it compiled."""
    env = {k: v for k, v in os.environ.items() if k not in ("KERAS_BACKEND", "XLA_FLAGS")}
    caching = {} if cache is None else {"JAX_COMPILATION_CACHE_DIR": str(cache),
                                        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                                        "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1"}
    return {**env, "PYTHONUNBUFFERED": "1", "JAX_DISABLE_MOST_OPTIMIZATIONS": "1", **caching, **extra}


@pytest.fixture(scope="session", autouse=True)
def jax_compilation_cache(tmp_path_factory, worker_id):
    """Under JAX (``make test``'s layer run), the workers of one run share XLA's compilation cache in
    its temporary folder, however short a compile: the layers' small eager programs recur across
    tests and workers, and a program one worker compiled the other loads. Nothing outlives the run
    (each run starts with an empty cache)."""
    import keras

    if keras.backend.backend() == "jax":
        import jax

        shared = tmp_path_factory.getbasetemp() if worker_id == "master" else tmp_path_factory.getbasetemp().parent
        jax.config.update("jax_compilation_cache_dir", str(shared / "jax-compilation-cache"))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)


@pytest.fixture
def shared_data() -> Path:
    """``../shared/data`` (relative to the repo root), or skip the test when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real data not found at {SHARED_DATA} (see its README.md)")
    return SHARED_DATA


# --- Generated ticket data for the classify tests (helper A) --------------------------------------

TICKET_QUEUES = {
    "Billing & Payments": ["invoice", "refund", "charge", "payment", "bill", "price"],
    "Hardware": ["laptop", "screen", "keyboard", "mouse", "boot", "battery"],
    "Access": ["password", "login", "account", "locked", "permission", "vpn"],
}
TICKET_FILLER = "please help me with my the a today urgent thanks again issue since monday".split()


def cli(capsys, *argv) -> tuple[int, str, str]:
    """``kformer ARGV`` in-process through :func:`kformer.cli.main`: (exit status, stdout, stderr);
    argparse's exit is caught. TensorFlow is already loaded: a fraction of a new process's start-up."""
    from kformer.cli import main

    capsys.readouterr()
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:  # argparse
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def write_csv(path: Path, rows, header=("text", "label")) -> Path:
    import csv

    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def write_tickets(path: Path, n: int, seed: int, long_text: bool = False) -> Path:
    """``n`` generated tickets (text,label CSV): filler words plus two keywords of the queue.

    With ``long_text`` one more Hardware ticket has 50,000 words.
    """
    import random

    rng = random.Random(seed)
    rows = [
        (" ".join(rng.sample(TICKET_FILLER, 5) + rng.sample(TICKET_QUEUES[label], 2)), label)
        for label in rng.choices(list(TICKET_QUEUES), k=n)
    ]
    if long_text:
        rows.append((" ".join(rng.choice(TICKET_FILLER) for _ in range(50_000)) + " laptop screen", "Hardware"))
    return write_csv(path, rows)


# --- Generated English->Tamil number words for the translate tests (helper C) ---------------------

NUMBER_WORDS = {"one": "ஒன்று", "two": "இரண்டு", "three": "மூன்று", "four": "நான்கு", "five": "ஐந்து",
                "six": "ஆறு", "seven": "ஏழு", "eight": "எட்டு", "nine": "ஒன்பது", "ten": "பத்து"}


def number_pairs(count: int, seed: int) -> list[tuple[str, str]]:
    """``count`` pairs of one or two English number words and their Tamil words."""
    import random

    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        chosen = [rng.choice(list(NUMBER_WORDS)) for _ in range(rng.randint(1, 2))]
        pairs.append((" ".join(chosen), " ".join(NUMBER_WORDS[w] for w in chosen)))
    return pairs


def write_tsv_pairs(path: Path, pairs) -> Path:
    """``source<TAB>target<TAB>attribution`` lines (the extra column is ignored by readers)."""
    path.write_text("".join(f"{s}\t{t}\tattribution\n" for s, t in pairs), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory, worker_id) -> dict[str, Path]:
    """Folders of the tiny classifier, translator and arithmetic model the serving and export tests
    share (server_helpers.py), trained once per test run: pytest-xdist's workers share one copy
    (the first to ask trains it under a file lock, the others wait for it and read it, as
    pytest-xdist's docs show), so tests must not write into them."""
    import json
    import shutil

    from filelock import FileLock
    from server_helpers import train_tiny_models

    shared = tmp_path_factory.getbasetemp() if worker_id == "master" else tmp_path_factory.getbasetemp().parent
    root, done = shared / "tiny-models", shared / "tiny-models.json"
    with FileLock(f"{root}.lock"):
        if not done.is_file():
            shutil.rmtree(root, ignore_errors=True)  # a run stopped half-way
            root.mkdir()
            folders = train_tiny_models(root)
            done.write_text(json.dumps({name: folder.name for name, folder in folders.items()}), encoding="utf-8")
    return {name: root / folder for name, folder in json.loads(done.read_text(encoding="utf-8")).items()}


@pytest.fixture(scope="module")
def eager_decoding():
    """Decode without compiling the decode loop: tiny models and a handful of steps are quicker
    eagerly than through one XLA compilation per decode shape."""
    from kformer.models import generation

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(generation, "COMPILE", False, raising=False)
        yield
