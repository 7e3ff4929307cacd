"""Reading labelled texts: CSV, TSV, JSONL (each optionally ``.gz``) and ``pos/``/``neg/`` folders.

Labels stay the strings the user wrote. :func:`iter_labelled` and :func:`iter_texts` stream a
file of any size in chunks of rows; :func:`read_labelled` and :func:`read_unlabelled` collect them. Every problem (undecodable bytes, a missing column,
no usable rows) is a one-line :class:`~kformer.errors.KformerError` that says what to fix.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from kformer.data.io import read_text, read_text_lines
from kformer.errors import KformerError

TABLE_SUFFIXES = {".csv": ",", ".tsv": "\t"}
JSON_SUFFIXES = (".jsonl", ".ndjson", ".json")
CHUNK_ROWS = 4096  # rows per chunk of the streaming readers (iter_labelled, iter_texts)


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


class _TextStream(io.TextIOBase):
    """A read-only text stream over an iterator of strings (what pandas reads a file through)."""

    def __init__(self, parts: Iterator[str]):
        super().__init__()
        self._parts, self._buffer = parts, ""

    def readable(self) -> bool:
        return True

    def read(self, size: int | None = -1) -> str:
        if size is None or size < 0:
            text, self._buffer = self._buffer + "".join(self._parts), ""
            return text
        pieces, have = [self._buffer], len(self._buffer)
        while have < size:
            part = next(self._parts, None)
            if part is None:
                break
            pieces.append(part)
            have += len(part)
        text = "".join(pieces)
        text, self._buffer = text[:size], text[size:]
        return text


def _decoded(path: Path) -> Iterator[str]:
    """The file as decoded text, line by line (a bad byte names its line), lines joined by newlines."""
    for number, line in read_text_lines(path):
        yield line if number == 1 else "\n" + line


def _table_chunks(path: Path, sep: str, chunk_rows: int) -> Iterator[list[dict[str, str]]]:
    """Rows of a CSV/TSV file as dicts, ``chunk_rows`` at a time (never the whole file at once)."""
    import pandas as pd

    kind = "CSV" if sep == "," else "TSV"
    try:
        reader = pd.read_csv(
            _TextStream(_decoded(path)),
            sep=sep,
            dtype=str,
            keep_default_na=False,
            quoting=csv.QUOTE_MINIMAL if sep == "," else csv.QUOTE_NONE,
            chunksize=chunk_rows,
        )
        columns = None
        for frame in reader:
            if not isinstance(frame.index, pd.RangeIndex):  # pandas made the surplus leading fields an index
                raise KformerError(
                    f"{path}: every row has {frame.index.nlevels} more field(s) than the header "
                    f"({', '.join(map(str, frame.columns))}); quote texts that contain '{sep}' or add the missing column names"
                )
            if columns is None:
                columns = [str(c).strip() for c in frame.columns]
                twice = sorted({c for c in columns if columns.count(c) > 1})
                if twice:
                    raise KformerError(f"{path}: the header names column(s) {', '.join(map(repr, twice))} twice; "
                                       "rename one of them")
            frame.columns = columns
            yield frame.to_dict("records")
    except pd.errors.EmptyDataError:
        raise KformerError(f"{path} has no rows") from None
    except (pd.errors.ParserError, ValueError) as exc:
        reason = (str(exc).strip().splitlines() or ["parse error"])[0]
        raise KformerError(f"{path} is not a valid {kind} file ({reason})") from None


def _jsonl_rows(path: Path) -> Iterator[dict]:
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
        yield row


def _encodable(value) -> bool:
    """False for a string with a lone surrogate (JSON can escape one; UTF-8 cannot hold it)."""
    if not isinstance(value, str):
        return True  # other values become text through str(), which escapes surrogates
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _folder_rows(path: Path, text_column: str, label_column: str) -> Iterator[dict]:
    found = False
    for label_dir in sorted(p for p in path.iterdir() if p.is_dir()):
        for file in sorted(label_dir.glob("*.txt")):
            found = True
            text = "" if file.stat().st_size == 0 else read_text(file)
            yield {text_column: text, label_column: label_dir.name}
    if not found:
        raise KformerError(f"{path} has no label folders with .txt files; expected e.g. {path}/pos/*.txt and {path}/neg/*.txt")


def _chunked(rows: Iterable[dict], chunk_rows: int) -> Iterator[list[dict]]:
    chunk: list[dict] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= chunk_rows:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _row_chunks(path: Path, text_column: str, label_column: str, chunk_rows: int | None) -> Iterator[list[dict]]:
    """The rows of ``path`` (any supported format) as dicts, at most ``chunk_rows`` per list."""
    chunk_rows = CHUNK_ROWS if chunk_rows is None else chunk_rows
    if isinstance(chunk_rows, bool) or not isinstance(chunk_rows, int) or chunk_rows < 1:
        raise KformerError(f"chunk_rows must be a whole number of at least 1, got {chunk_rows!r}")
    kind = _format(path)
    if kind == "folder":
        return _chunked(_folder_rows(path, text_column, label_column), chunk_rows)
    if kind == "jsonl":
        return _chunked(_jsonl_rows(path), chunk_rows)
    if kind == "txt":
        return _chunked(({text_column: line} for _, line in read_text_lines(path)), chunk_rows)
    return _table_chunks(path, TABLE_SUFFIXES["." + kind], chunk_rows)


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


def _existing(path: str | os.PathLike) -> Path:
    path = Path(path)
    if not path.exists():
        raise KformerError(f"{path} does not exist")
    return path


def iter_labelled(path: str | os.PathLike, text_column: str = "text", label_column: str = "label",
                  chunk_rows: int | None = None) -> Iterator[LabelledTexts]:
    """:func:`read_labelled`, streamed: LabelledTexts of at most ``chunk_rows`` (default
    :data:`CHUNK_ROWS`) rows at a time, so a file of any size is read in bounded memory. Each chunk counts the rows it ``dropped``; the
    warning about them, and the error when no row is usable, come after the last chunk."""
    path = _existing(path)
    total = dropped = kept = 0
    for number, rows in enumerate(_row_chunks(path, text_column, label_column, chunk_rows)):
        if number == 0:
            _check_column(rows, text_column, path, "--text-column")
            _check_column(rows, label_column, path, "--label-column")
        texts, labels = [], []
        for row in rows:
            text, label = _as_text(row.get(text_column)).strip(), _as_text(row.get(label_column)).strip()
            if text and label:
                texts.append(text)
                labels.append(label)
        total, kept, dropped = total + len(rows), kept + len(texts), dropped + len(rows) - len(texts)
        if texts:
            yield LabelledTexts(texts, labels, str(path), len(rows) - len(texts))
    if total == 0:
        raise KformerError(f"{path} has no rows")
    if not kept:
        raise KformerError(f"{path}: all {total} rows have an empty text or label")
    if dropped:
        _warn(f"{path}: dropped {dropped} of {total} rows with an empty text or label")


def read_labelled(path: str | os.PathLike, text_column: str = "text", label_column: str = "label") -> LabelledTexts:
    """Texts and string labels from a CSV/TSV/JSONL file (``.gz`` too) or a folder of label folders.

    Rows whose text or label is empty are dropped with a warning (and counted in ``dropped``);
    none left is an error.
    """
    texts, labels, dropped = [], [], 0
    for chunk in iter_labelled(path, text_column, label_column):
        texts += chunk.texts
        labels += chunk.labels
        dropped += chunk.dropped
    return LabelledTexts(texts, labels, str(Path(path)), dropped)


def iter_texts(path: str | os.PathLike, text_column: str = "text", chunk_rows: int | None = None) -> Iterator[list[str]]:
    """:func:`read_unlabelled`, streamed: lists of at most ``chunk_rows`` (default :data:`CHUNK_ROWS`)
    texts at a time."""
    path = _existing(path)
    if path.is_dir():
        raise KformerError(f"{path} is a folder; pass a .csv, .tsv, .jsonl or .txt file of texts")
    total = 0
    for number, rows in enumerate(_row_chunks(path, text_column, "label", chunk_rows)):
        if number == 0:
            _check_column(rows, text_column, path, "--text-column")
        total += len(rows)
        yield [_as_text(row.get(text_column)).strip() for row in rows]
    if total == 0:
        raise KformerError(f"{path} has no rows")


def read_unlabelled(path: str | os.PathLike, text_column: str = "text") -> list[str]:
    """Texts to predict: a table/JSONL column, or one text per line of a ``.txt`` file.

    Empty texts are kept (as empty strings) so that outputs line up with inputs.
    """
    return [text for chunk in iter_texts(path, text_column) for text in chunk]
