"""Training data of several corpora: which pair files ``data`` names, and what each one is called.

``data`` may be

- one pair file (``source<TAB>target`` lines, ``.gz`` fine): one corpus, as kformer has always read;
- several paths: a list in Python, ``a.tsv,b.tsv`` (comma-separated) on the command line;
- a folder: every pair file under it (``*.tsv``, ``*.txt``, either ``.gz``), skipping ``*.meta.tsv``
  (metadata, not pairs), hidden files and anything under a folder named ``original`` (raw downloads);
- a manifest, ``*.toml`` (``[[corpus]]`` tables) or ``*.csv`` (a header row), naming each corpus's
  ``path`` (relative to the manifest), and optionally its ``name``, sampling ``weight`` and ``tag``.

A corpus found in a folder is named by its path relative to that folder without suffixes, a
generic file stem (a language pair such as ``en-ta``) dropped:
``en-ta-bible/en-ta.tsv.gz`` -> ``en-ta-bible``, ``en-ta-nlpc-uom/glossary.tsv`` ->
``en-ta-nlpc-uom/glossary``; a file right in the folder given is named from the folder above it,
so ``--data en-ta-nlpc-uom`` names its two files the same way. A file given alone is named by its stem the same way (its folder's
name when the stem is generic). Every problem is a one-line :class:`~kformer.errors.BadInput`
naming the field at fault (``data``, ``data.corpus[2].weight``, ...).
"""

from __future__ import annotations

import csv
import math
import os
import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePath

from kformer.errors import BadInput, KformerError

PAIR_SUFFIXES = (".tsv", ".tsv.gz", ".txt", ".txt.gz")
SKIPPED_SUFFIX = ".meta.tsv"  # line-aligned metadata beside a pair file (TICO-19, Joshua IPC)
SKIPPED_FOLDER = "original"  # raw downloads kept beside the pairs made from them
MANIFEST_SUFFIXES = (".toml", ".csv")
MANIFEST_KEYS = ("path", "name", "weight", "tag")
GENERIC_STEM = re.compile(r"^[a-z]{2,3}-[a-z]{2,3}$", re.IGNORECASE)  # a language pair: en-ta, eng-tam
# A tag is a word naming the corpus's domain (``--domain news``): letters, digits, ``_.-``.
TAG_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,47}$")


@dataclass(frozen=True)
class Corpus:
    """One corpus of the training data: its ``name``, its file (None: pairs given in memory), its
    sampling ``weight`` (a multiplier of its natural share per epoch; None: not given) and its
    ``tag`` (the domain word its sources are marked with when corpus tags are on; None: not given)."""

    name: str
    path: Path | None = None
    weight: float | None = None
    tag: str | None = None


def is_paths(data) -> bool:
    """Whether ``data`` names files (a path, or a non-empty list of paths) rather than pairs in memory."""
    if isinstance(data, str | os.PathLike):
        return True
    return (isinstance(data, Sequence) and not isinstance(data, bytes) and bool(data)
            and all(isinstance(item, str | os.PathLike) for item in data))


def find_corpora(data, field: str = "data") -> list[Corpus]:
    """The corpora ``data`` names (see the module's docstring), checked but not read: every file
    exists, names are distinct, weights positive, tags words."""
    if isinstance(data, str) and "," in data and not Path(data).exists():
        data = [part.strip() for part in data.split(",") if part.strip()]
    items = [data] if isinstance(data, str | os.PathLike) else list(data)
    corpora = [corpus for item in items for corpus in _expand(Path(item), field)]
    if not corpora:
        raise BadInput(f"{{field}}: no pair files (*.tsv, *.txt, .gz fine) found in {data}", field=field)
    _check_distinct(corpora, field)
    return corpora


def read_corpora(data, field: str = "data") -> list[tuple[Corpus, list]]:
    """``(corpus, pairs)`` per corpus of ``data``; each :class:`~kformer.data.pairs.Pair` carries
    its corpus's name. A file that is not pairs is a BadInput naming it."""
    from kformer.data.pairs import read_pairs

    read = []
    for corpus in find_corpora(data, field):
        try:
            pairs = read_pairs(corpus.path)
        except KformerError as exc:
            raise BadInput(exc.message_for(), field=field) from None
        read.append((corpus, [replace(pair, corpus=corpus.name) for pair in pairs]))
    return read


def corpus_name(relative: PurePath, folder_name: str = "") -> str:
    """The name of the pair file at ``relative`` (to the folder it was found in): the path without
    suffixes, a generic stem dropped (``folder_name`` when nothing else is left)."""
    stem = relative.name.split(".")[0]
    parts = [*relative.parent.parts, *([] if GENERIC_STEM.match(stem) else [stem])]
    return "/".join(parts) or folder_name or stem


def default_tag(name: str) -> str:
    """The tag of a corpus whose manifest gives none: its name, runs of other characters -> ``-``."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-._")[:48] or "corpus"


def check_tag(tag, field: str) -> str:
    """``tag`` if it is a word :data:`TAG_PATTERN` allows, else BadInput naming ``field``."""
    if not isinstance(tag, str) or not TAG_PATTERN.match(tag):
        raise BadInput(f"{{field}} must be a word of letters, digits and _.- (at most 48 characters), not {tag!r}",
                       field=field)
    return tag


# --- the forms of data ---------------------------------------------------------------------------


def _expand(path: Path, field: str) -> list[Corpus]:
    if path.is_dir():
        return _folder(path)
    if not path.is_file():
        raise BadInput(f"{path} does not exist", field=field)
    if path.suffix.lower() in MANIFEST_SUFFIXES:
        return _manifest(path, field)
    parent = path.parent.resolve().name
    return [Corpus(corpus_name(PurePath(path.name), parent), path)]


def _folder(folder: Path) -> list[Corpus]:
    """Every pair file under ``folder``, in path order."""
    found = []
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if (not path.is_file() or SKIPPED_FOLDER in relative.parent.parts or path.name.endswith(SKIPPED_SUFFIX)
                or any(part.startswith(".") for part in relative.parts)
                or not path.name.lower().endswith(PAIR_SUFFIXES)):
            continue
        if len(relative.parts) == 1:  # directly in the folder given: named as from the folder above
            relative = PurePath(folder.resolve().name) / relative
        found.append(Corpus(corpus_name(relative), path))
    return found


def _manifest(path: Path, field: str) -> list[Corpus]:
    """The corpora a ``.toml`` or ``.csv`` manifest lists, paths relative to it."""
    entries = _toml_entries(path, field) if path.suffix.lower() == ".toml" else _csv_entries(path, field)
    if not entries:
        raise BadInput(f"{{field}}: the manifest {path} lists no corpus", field=field)
    return [_entry(entry, path.parent, f"{field}.corpus[{i}]") for i, entry in enumerate(entries)]


def _toml_entries(path: Path, field: str) -> list[dict]:
    try:
        manifest = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise BadInput(f"{{field}}: {path} is not valid TOML ({exc})", field=field) from None
    unknown = sorted(set(manifest) - {"corpus"})
    if unknown:
        raise BadInput(f"unknown key {{field}} in {path}; a manifest holds [[corpus]] tables", field=f"{field}.{unknown[0]}")
    entries = manifest.get("corpus", [])
    if not isinstance(entries, list) or not all(isinstance(entry, dict) for entry in entries):
        raise BadInput(f"{{field}} in {path} must be [[corpus]] tables", field=f"{field}.corpus")
    return entries


def _csv_entries(path: Path, field: str) -> list[dict]:
    try:
        rows = list(csv.DictReader(path.read_text(encoding="utf-8").splitlines()))
    except (csv.Error, UnicodeDecodeError) as exc:
        raise BadInput(f"{{field}}: {path} is not a CSV manifest ({exc})", field=field) from None
    return [{key: value for key, value in row.items() if value not in ("", None)} for row in rows]


def _entry(entry: dict, base: Path, field: str) -> Corpus:
    """One manifest entry as a :class:`Corpus`; BadInput naming the key at fault."""
    unknown = sorted(str(key) for key in set(entry) - set(MANIFEST_KEYS))
    if unknown:
        raise BadInput(f"unknown key {{field}}; a corpus has {', '.join(MANIFEST_KEYS)}", field=f"{field}.{unknown[0]}")
    if not isinstance(entry.get("path"), str) or not entry["path"].strip():
        raise BadInput("{field} is required: the corpus's pair file, relative to the manifest", field=f"{field}.path")
    path = base / entry["path"]
    if not path.is_file():
        raise BadInput(f"{{field}}: {path} is not a file", field=f"{field}.path")
    name = entry.get("name", corpus_name(PurePath(entry["path"])))
    if not isinstance(name, str) or not name.strip():
        raise BadInput(f"{{field}} must be a non-empty string, not {name!r}", field=f"{field}.name")
    tag = None if entry.get("tag") is None else check_tag(entry["tag"], f"{field}.tag")
    return Corpus(name.strip(), path, _weight(entry.get("weight"), f"{field}.weight"), tag)


def _weight(value, field: str) -> float | None:
    if value is None:
        return None
    try:
        weight = float(value) if not isinstance(value, bool) else math.nan
    except ValueError:
        weight = math.nan
    if not math.isfinite(weight) or weight <= 0:
        raise BadInput(f"{{field}} must be a positive number (a multiplier of the corpus's share), not {value!r}",
                       field=field)
    return weight


def _check_distinct(corpora: list[Corpus], field: str) -> None:
    seen: dict[str, Path | None] = {}
    for corpus in corpora:
        if corpus.name in seen:
            raise BadInput(f"{{field}}: two corpora are named {corpus.name!r} ({seen[corpus.name]} and {corpus.path}); "
                           "name them in a manifest", field=field)
        seen[corpus.name] = corpus.path
