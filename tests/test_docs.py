"""README.md and the guides in docs/ say what kformer does, and keep saying it.

- Every ```python block of a file runs, in order, in one namespace, in a temporary working
  directory holding the small files that file's examples name (``SETUP``). A block that cannot
  run in a test is preceded by ``<!-- not run: REASON -->``; the reason is required.
- Some examples' claims are checked right after the example runs (``CHECKS``).
- Every ``kformer ...`` command line in a ```bash / ```console block parses with the real CLI
  parser (``kformer.cli.build_parser``), so a renamed or removed flag fails here; every
  ``python -m bench.NAME`` names a script in bench/.
- Every relative link points to a file that exists (and a ``#heading`` to a heading in it).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]
NOT_RUN = re.compile(r"<!--\s*not run:\s*(.*?)\s*-->\s*$")


@dataclass
class Block:
    language: str
    code: str
    line: int  # 1-based line of the opening fence
    heading: str  # the nearest heading above it, without the #s
    not_run: str | None  # the reason given in a <!-- not run: ... --> comment right above it


def blocks(path: Path) -> list[Block]:
    found, heading, previous = [], "", ""
    lines = path.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        line = lines[index]
        fence = re.match(r"^(```+|~~~+)\s*([\w-]*)", line)
        if fence:
            end = next(i for i in range(index + 1, len(lines)) if lines[i].startswith(fence.group(1)))
            reason = NOT_RUN.match(previous)
            found.append(Block(fence.group(2).lower(), "\n".join(lines[index + 1:end]) + "\n", index + 1, heading,
                               reason.group(1) if reason else None))
            index, previous = end + 1, ""
            continue
        if line.startswith("#"):
            heading = line.lstrip("#").strip()
        if line.strip():
            previous = line
        index += 1
    return found


def name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


# --- the small files each document's examples use -----------------------------------------------------------

TICKETS = [("my laptop will not boot", "hardware"), ("refund my invoice", "billing"),
           ("the screen stays black", "hardware"), ("I was charged twice", "billing"),
           ("the keyboard is broken", "hardware"), ("send me a receipt", "billing")]
PAIRS = [("I see two cats", "veo dos gatos"), ("I see three cats", "veo tres gatos"),
         ("I see four dogs", "veo cuatro perros"), ("I see two dogs", "veo dos perros")]


def _tickets_csv(rows) -> str:
    return "text,label\n" + "".join(f'"{text}",{label}\n' for text, label in rows)


def _pairs_tsv(pairs) -> str:
    return "".join(f"{source}\t{target}\n" for source, target in pairs)


FILES = {
    "tickets.csv": _tickets_csv(TICKETS * 10),
    "test.csv": _tickets_csv(TICKETS),
    "pairs.tsv": _pairs_tsv(PAIRS * 8),
    "test.tsv": _pairs_tsv(PAIRS),
}
# name -> (files, model folders from the README's run copied in as {folder here: folder there})
SETUP: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "docs/classification.md": (("tickets.csv", "test.csv"), {}),
    "docs/translation.md": (("pairs.tsv", "test.tsv"), {}),
    "docs/building-blocks.md": ((), {"runs/arith": "runs/py-arith"}),
    "docs/serving.md": ((), {"runs/tickets": "runs/py-tickets", "runs/en-es": "runs/py-en-es"}),
    "docs/export.md": (("tickets.csv",), {}),
    "docs/training.md": ((), {}),
    "docs/errors.md": (("tickets.csv",), {}),
}


# --- claims checked right after an example runs: (document, heading) -> check(namespace) ---------------------


def check_python_api(namespace: dict) -> None:
    from kformer.tasks.arithmetic import ArithmeticModel
    from kformer.tasks.classify import Classifier
    from kformer.tasks.translate import Translator

    assert sorted(os.listdir("runs")) == ["py-arith", "py-en-es", "py-tickets"]
    tickets = namespace["tickets"]
    assert isinstance(tickets, Classifier) and tickets.labels == ["billing", "hardware"]
    best = namespace["best"]
    assert best["label"] == "hardware" and [t["label"] for t in best["top_k"]] == ["hardware", "billing"]
    assert namespace["scores"]["accuracy"] == 1.0 and namespace["scores"]["n"] == 60
    encoder = namespace["encoder"]
    assert encoder.shape[:2] == (1, 2) and encoder.shape[2] == encoder.shape[3] == 5
    np.testing.assert_allclose(encoder.sum(axis=-1), 1.0, atol=1e-5)

    import sacrebleu

    spanish, held = namespace["spanish"], namespace["pairs"][:3]
    assert isinstance(spanish, Translator)
    hypotheses = spanish.translate([source for source, _ in held])  # evaluate's score is sacrebleu's on these
    expected = sacrebleu.corpus_bleu(hypotheses, [[target for _, target in held]]).score
    assert namespace["bleu"] == pytest.approx(expected, abs=1e-6)
    cross = namespace["cross"]
    assert cross.ndim == 4 and cross.shape[:2] == (1, 2)
    np.testing.assert_allclose(cross.sum(axis=-1), 1.0, atol=1e-5)

    sums = namespace["sums"]
    assert isinstance(sums, ArithmeticModel) and len(namespace["answers"]) == 2
    expected = np.mean([namespace["answers"][0] == 46, namespace["answers"][1] == 94])
    assert namespace["exact"] == expected
    maps = namespace["answer_maps"]
    assert set(maps.maps) == {"encoder", "decoder_self", "cross"} and maps.output.startswith("12+34=")


def check_building_blocks(namespace: dict) -> None:
    assert namespace["model"].layers[2].count_params() == 8_544
    assert tuple(namespace["weights"].shape) == (1, 5, 5)
    assert float(namespace["weights"][0, 0, 3]) == 0.0
    assert tuple(namespace["cross_scores"].shape) == (1, 2, 3, 5)
    assert tuple(namespace["step"].shape) == (1, 1, 8)


def check_decoding(namespace: dict) -> None:
    ids, beams = np.asarray(namespace["ids"]), np.asarray(namespace["beams"])
    assert ids.shape[0] == beams.shape[0] == 2 and ids.shape[1] <= 8 and beams.shape[1] <= 8
    np.testing.assert_array_equal(ids, np.asarray(namespace["recomputed"]))


def check_export(namespace: dict) -> None:
    assert namespace["onnx"].metadata["labels"] == ["billing", "hardware"]
    assert sorted(namespace["saved"].metadata["signatures"]) == ["serving_default", "texts"]
    assert (Path("exports/tickets-onnx") / "model.onnx").exists() and (Path("exports/tickets") / "1").is_dir()


CHECKS: dict[tuple[str, str], Callable[[dict], None]] = {
    ("README.md", "From Python"): check_python_api,
    ("docs/building-blocks.md", "Layers from Python"): check_building_blocks,
    ("docs/building-blocks.md", "Decoding"): check_decoding,
    ("docs/export.md", "From Python"): check_export,
}


def run_python_blocks(document: Path, namespace: dict) -> list[str]:
    """Run ``document``'s python blocks in ``namespace``; return the checks that ran."""
    ran = []
    for block in blocks(document):
        if block.language != "python" or block.not_run:
            continue
        exec(compile("\n" * (block.line) + block.code, str(document), "exec"), namespace)
        check = CHECKS.get((name(document), block.heading))
        if check and f"{name(document)}: {block.heading}" not in ran:
            check(namespace)
            ran.append(f"{name(document)}: {block.heading}")
    return ran


@pytest.fixture(scope="session")
def readme_run(tmp_path_factory):
    """The README's Python examples, run once: (their namespace, the folder they wrote)."""
    from kformer.models import generation

    folder = tmp_path_factory.mktemp("readme")
    namespace: dict = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(generation, "COMPILE", False)  # a handful of decoding steps: skip compiling
        patch.chdir(folder)
        ran = run_python_blocks(README, namespace)
    assert ran == ["README.md: From Python"]
    return namespace, folder


@pytest.mark.slow
def test_readme_python_example_trains_loads_and_explains_every_task(readme_run):
    """The README's "From Python" example ran (in the fixture) and its claims held."""
    assert "tickets" in readme_run[0]


@pytest.mark.slow
@pytest.mark.parametrize("document", [doc for doc in DOCS if doc != README and any(
    block.language == "python" for block in blocks(doc))], ids=name)
def test_python_examples_run(document, readme_run, tmp_path, monkeypatch):
    from kformer.models import generation

    monkeypatch.setattr(generation, "COMPILE", False)
    monkeypatch.chdir(tmp_path)
    files, folders = SETUP.get(name(document), ((), {}))
    for file in files:
        Path(file).write_text(FILES[file], encoding="utf-8")
    for here, there in folders.items():
        shutil.copytree(readme_run[1] / there, here)
    ran = run_python_blocks(document, {})
    expected = [f"{doc}: {heading}" for doc, heading in CHECKS if doc == name(document)]
    assert ran == expected, "a checked example was not found under its heading"


def test_every_example_that_is_not_run_says_why():
    skipped = [(name(doc), block.line, block.not_run) for doc in DOCS for block in blocks(doc) if block.not_run]
    assert all(reason.strip() for _, _, reason in skipped)
    assert len(skipped) <= 8, f"keep the examples that are not run to a few: {skipped}"
    for doc in DOCS:
        for block in blocks(doc):
            assert block.language in {"python", "bash", "console", "text", "json", "toml", "http", "yaml", ""}, (
                f"{name(doc)}:{block.line}: a ```{block.language} block is neither run nor parsed")


def test_every_yaml_block_parses():
    import yaml

    for doc in DOCS:
        for block in blocks(doc):
            if block.language == "yaml":
                assert list(yaml.safe_load_all(block.code)), f"{name(doc)}:{block.line}: an empty ```yaml block"


# --- command lines ----------------------------------------------------------------------------------------------


def command_lines(document: Path) -> list[tuple[int, list[str]]]:
    """(line, words) of every ``kformer ...`` and ``python -m bench...`` command in shell blocks,
    continuation lines joined, comments, pipes and redirections dropped."""
    found = []
    for block in blocks(document):
        if block.language not in {"bash", "console", "sh", "shell"}:
            continue
        joined = re.sub(r"\\\n\s*", " ", block.code)
        for offset, line in enumerate(joined.splitlines()):
            line = re.sub(r"^\$\s+", "", line.strip())
            if not line or line.startswith("#"):
                continue
            lexer = shlex.shlex(line, posix=True, punctuation_chars="|&;<>")
            lexer.whitespace_split, lexer.commenters = True, "#"
            words: list[str] = []
            for word in [*lexer, "|"]:
                if set(word) <= set("|&;<>"):
                    if words:
                        found.append((block.line + 1 + offset, words))
                    words = []
                elif words or not re.match(r"^\w+=", word):  # skip VAR=value before the command
                    words.append(word)
    return found


KFORMER = re.compile(r"^(\S*/)?kformer$")


def test_every_kformer_command_line_in_the_docs_parses():
    from kformer.cli import build_parser

    checked = 0
    for document in DOCS:
        for line, words in command_lines(document):
            if KFORMER.match(words[0]):
                args = words[1:]
            elif words[:3] == ["python", "-m", "kformer"]:
                args = words[3:]
            else:
                continue
            stderr = io.StringIO()
            with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
                try:
                    build_parser().parse_args(args)
                except SystemExit as exc:
                    assert exc.code == 0, f"{name(document)}:{line}: {shlex.join(words)}\n{stderr.getvalue()}"
            checked += 1
    assert checked >= 40


def test_every_bench_command_in_the_docs_names_a_script():
    for document in [*DOCS, ROOT / "BENCHMARKS.md"]:
        for line, words in command_lines(document):
            if words[:2] == ["python", "-m"] and words[2].startswith("bench."):
                assert (ROOT / "bench" / f"{words[2].split('.', 1)[1]}.py").exists(), f"{name(document)}:{line}"
    mentioned = set()
    for document in DOCS:
        mentioned |= set(re.findall(r"python -m (bench\.[a-z_0-9]+)\b", document.read_text(encoding="utf-8")))
    for module in mentioned:
        assert (ROOT / "bench" / f"{module.split('.', 1)[1]}.py").exists(), module


# --- links ------------------------------------------------------------------------------------------------------


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    heading = re.sub(r"[`*_]|<[^>]+>", "", heading.strip().lower())
    heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    return re.sub(r"[^\w\- ]", "", heading).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"^(```|~~~).*?^\1", "", path.read_text(encoding="utf-8"), flags=re.S | re.M)
    found: set[str] = set()
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*$", text, re.M):
        base, count = slug(heading), 0
        while (candidate := base if count == 0 else f"{base}-{count}") in found:
            count += 1
        found.add(candidate)
    return found


def test_every_relative_link_points_to_a_file_and_heading_that_exist():
    for document in [*DOCS, ROOT / "BENCHMARKS.md"]:
        text = re.sub(r"^(```|~~~).*?^\1", "", document.read_text(encoding="utf-8"), flags=re.S | re.M)
        for target in re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", text):
            if re.match(r"^[a-z]+:", target):
                continue  # http(s), mailto
            path, _, anchor = target.partition("#")
            resolved = (document.parent / path).resolve() if path else document
            assert resolved.exists(), f"{name(document)}: link to {target}: no such file"
            if anchor and resolved.suffix == ".md":
                assert anchor in anchors(resolved), f"{name(document)}: link to {target}: no such heading"


def test_readme_is_short_and_links_every_guide():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    for guide in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "BENCHMARKS.md"]:
        if guide.name != "benchmarks-history.md":
            assert f"]({name(guide)})" in text, f"README.md does not link {name(guide)}"


def test_the_errors_guide_table_is_the_error_table():
    from kformer.errors import ERROR_TABLE

    text = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    for kind, (exit_code, http_status, _) in ERROR_TABLE.items():
        row = next(line for line in text.splitlines() if line.startswith(f"| `{kind.__name__}`"))
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert cells[1:3] == [str(exit_code), str(http_status)], row
