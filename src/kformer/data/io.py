"""Opening user files: plain or gzipped UTF-8, with one-line errors that name the problem."""

from __future__ import annotations

import gzip
import io
import os
import zlib
from collections.abc import Iterator
from pathlib import Path

from kformer.errors import KformerError


def open_binary(path: str | os.PathLike) -> io.BufferedIOBase:
    """Open a file (``.gz`` is decompressed) for reading bytes, after checking it exists and has content."""
    path = Path(path)
    if not path.exists():
        raise KformerError(f"{path} does not exist")
    if path.is_dir():
        raise KformerError(f"{path} is a folder, expected a file")
    if path.stat().st_size == 0:
        raise KformerError(f"{path} is empty")
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")  # noqa: SIM115


def read_text_lines(path: str | os.PathLike) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, line)`` (1-based, newline stripped) from a UTF-8 file (or ``.gz``).

    Undecodable bytes raise a KformerError naming the line, so a user can find and fix it.
    A leading byte-order mark is dropped.
    """
    try:
        with open_binary(path) as handle:
            for line_number, raw in enumerate(handle, start=1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise KformerError(
                        f"{path}: line {line_number} is not valid UTF-8 "
                        f"(byte {raw[exc.start:exc.start + 1]!r} at column {exc.start + 1}); re-save the file as UTF-8"
                    ) from None
                if line_number == 1:
                    line = line.removeprefix("\ufeff")
                yield line_number, line.rstrip("\r\n")
    except (OSError, EOFError, zlib.error) as exc:  # zlib.error: a .gz whose compressed data is damaged
        raise KformerError(f"{path}: cannot read it ({exc})") from None


def read_text(path: str | os.PathLike) -> str:
    """The whole file as one string, decoded as in :func:`read_text_lines`."""
    return "\n".join(line for _, line in read_text_lines(path))
