"""Reading labelled texts: CSV, TSV, JSONL (each optionally ``.gz``) and ``pos/``/``neg/`` folders.

Labels stay the strings the user wrote. Every problem (undecodable bytes, a missing column,
no usable rows) is a one-line :class:`~kformer.errors.KformerError` that says what to fix.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from kformer.data.io import read_text, read_text_lines
from kformer.errors import KformerError

TABLE_SUFFIXES = {".csv": ",", ".tsv": "\t"}
JSON_SUFFIXES = (".jsonl", ".ndjson", ".json")


@dataclass
class LabelledTexts:
    """Texts and their labels (strings), plus how many rows were dropped for an empty text."""

    texts: list[str]
    labels: list[str]
    source: str
    dropped: int = 0

    def __len__(self) -> int:
        return len(self.texts)


def _format(path: Path) -> str:
    if path.is_dir():
        return "folder"
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes = suffixes[:-1]
    last = suffixes[-1] if suffixes else ""
    if last in TABLE_SUFFIXES:
        return last[1:]
    if last in JSON_SUFFIXES:
        return "jsonl"
    if last == ".txt":
        return "txt"
    raise KformerError(f"{path}: unknown file type '{last or path.name}'; use .csv, .tsv, .jsonl (optionally .gz) or a folder")


def _read_table(path: Path, sep: str) -> list[dict[str, str]]:
    import pandas as pd

    text = read_text(path)  # decodes line by line, so a bad byte names its line
    try:
        frame = pd.read_csv(
            io.StringIO(text),
            sep=sep,
            dtype=str,
            keep_default_na=False,
            quoting=csv.QUOTE_MINIMAL if sep == "," else csv.QUOTE_NONE,
        )
    except pd.errors.EmptyDataError:
        raise KformerError(f"{path} has no rows") from None
    except (pd.errors.ParserError, ValueError) as exc:
        reason = (str(exc).strip().splitlines() or ["parse error"])[0]
        raise KformerError(f"{path} is not a valid {'CSV' if sep == ',' else 'TSV'} file ({reason})") from None
    if not isinstance(frame.index, pd.RangeIndex):  # pandas made the surplus leading fields an index
        extra = frame.index.nlevels
        raise KformerError(
            f"{path}: every row has {extra} more field(s) than the header ({', '.join(map(str, frame.columns))}); "
            f"quote texts that contain '{sep}' or add the missing column names"
        )
    columns = [str(c).strip() for c in frame.columns]
    twice = sorted({c for c in columns if columns.count(c) > 1})
    if twice:
        raise KformerError(f"{path}: the header names column(s) {', '.join(map(repr, twice))} twice; rename one of them")
    frame.columns = columns
    return frame.to_dict("records")


def _read_jsonl(path: Path) -> list[dict]:
    rows = []
    for line_number, line in read_text_lines(path):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise KformerError(f"{path}: line {line_number} is not valid JSON ({exc.msg}); one JSON object per line") from None
        except (ValueError, RecursionError) as exc:  # a number of over 4300 digits, nesting too deep
            reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).split(";")[0]
            raise KformerError(f"{path}: line {line_number} cannot be read as JSON ({reason}); one flat JSON object per line") from None
        if not isinstance(row, dict):
            raise KformerError(f"{path}: line {line_number} is not a JSON object; write {{\"text\": ..., \"label\": ...}}")
        if "\\u" in line and not all(_encodable(k) and _encodable(v) for k, v in row.items()):
            raise KformerError(
                f"{path}: line {line_number} has an unpaired surrogate escape (such as \\ud800), which is not text; "
                "write the character itself or its surrogate pair"
            )
        rows.append(row)
    return rows


def _encodable(value) -> bool:
    """False for a string with a lone surrogate (JSON can escape one; UTF-8 cannot hold it)."""
    if not isinstance(value, str):
        return True  # other values become text through str(), which escapes surrogates
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _read_folder(path: Path, text_column: str, label_column: str) -> list[dict]:
    rows = []
    for label_dir in sorted(p for p in path.iterdir() if p.is_dir()):
        for file in sorted(label_dir.glob("*.txt")):
            if file.stat().st_size == 0:
                rows.append({text_column: "", label_column: label_dir.name})
                continue
            rows.append({text_column: read_text(file), label_column: label_dir.name})
    if not rows:
        raise KformerError(f"{path} has no label folders with .txt files; expected e.g. {path}/pos/*.txt and {path}/neg/*.txt")
    return rows


def _read_rows(path: Path, text_column: str, label_column: str) -> list[dict]:
    kind = _format(path)
    if kind == "folder":
        return _read_folder(path, text_column, label_column)
    if kind == "jsonl":
        return _read_jsonl(path)
    if kind == "txt":
        return [{text_column: line} for _, line in read_text_lines(path)]
    return _read_table(path, TABLE_SUFFIXES["." + kind])


def _check_column(rows: list[dict], column: str, path: Path, flag: str) -> None:
    if not rows:
        raise KformerError(f"{path} has no rows")
    found = list(rows[0].keys()) if rows else []
    if column not in rows[0]:
        names = ", ".join(map(str, found)) or "none"
        raise KformerError(f"no column '{column}' in {path.name}; columns found: {names}. Use {flag}")


def _as_text(value) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)


def _warn(message: str) -> None:
    print(f"kformer: warning: {message}", file=sys.stderr)


def read_labelled(path: str | os.PathLike, text_column: str = "text", label_column: str = "label") -> LabelledTexts:
    """Texts and string labels from a CSV/TSV/JSONL file (``.gz`` too) or a folder of label folders.

    Rows whose text or label is empty are dropped with a warning; none left is an error.
    """
    path = Path(path)
    if not path.exists():
        raise KformerError(f"{path} does not exist")
    rows = _read_rows(path, text_column, label_column)
    _check_column(rows, text_column, path, "--text-column")
    _check_column(rows, label_column, path, "--label-column")
    texts, labels, dropped = [], [], 0
    for row in rows:
        text, label = _as_text(row.get(text_column)).strip(), _as_text(row.get(label_column)).strip()
        if not text or not label:
            dropped += 1
            continue
        texts.append(text)
        labels.append(label)
    if not texts:
        raise KformerError(f"{path}: all {len(rows)} rows have an empty text or label")
    if dropped:
        _warn(f"{path}: dropped {dropped} of {len(rows)} rows with an empty text or label")
    return LabelledTexts(texts, labels, str(path), dropped)


def read_unlabelled(path: str | os.PathLike, text_column: str = "text") -> list[str]:
    """Texts to predict: a table/JSONL column, or one text per line of a ``.txt`` file.

    Empty texts are kept (as empty strings) so that outputs line up with inputs.
    """
    path = Path(path)
    if not path.exists():
        raise KformerError(f"{path} does not exist")
    if path.is_dir():
        raise KformerError(f"{path} is a folder; pass a .csv, .tsv, .jsonl or .txt file of texts")
    rows = _read_rows(path, text_column, "label")
    _check_column(rows, text_column, path, "--text-column")
    return [_as_text(row.get(text_column)).strip() for row in rows]
