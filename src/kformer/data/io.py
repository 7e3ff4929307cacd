"""Opening user files: plain or gzipped UTF-8, with one-line errors that name the problem."""

from __future__ import annotations

import gzip
import io
import os
from collections.abc import Iterator
from pathlib import Path

from kformer.errors import KformerError


def open_text(path: str | os.PathLike) -> io.TextIOBase:
    """Open a UTF-8 text file (``.gz`` is decompressed) for reading, after checking it exists."""
    path = Path(path)
    if not path.exists():
        raise KformerError(f"{path} does not exist")
    if path.is_dir():
        raise KformerError(f"{path} is a folder, expected a file")
    if path.stat().st_size == 0:
        raise KformerError(f"{path} is empty")
    raw = gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")  # noqa: SIM115
    return io.TextIOWrapper(raw, encoding="utf-8", newline="")


def read_text_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, line)`` (1-based, newline stripped) from a UTF-8 file.

    Undecodable bytes raise a KformerError naming the line, so a user can find and fix it.
    """
    line_number = 0
    try:
        with open_text(path) as handle:
            for line_number, line in enumerate(handle, start=1):
                yield line_number, line.rstrip("\r\n")
    except UnicodeDecodeError as exc:
        raise KformerError(
            f"{path}: line {line_number + 1} is not valid UTF-8 (byte {exc.object[exc.start:exc.start + 1]!r}); "
            "re-save the file as UTF-8"
        ) from None
    except (OSError, EOFError, gzip.BadGzipFile) as exc:
        raise KformerError(f"{path}: cannot read it ({exc})") from None
