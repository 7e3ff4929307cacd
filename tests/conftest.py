"""Shared test fixtures (keep small; helpers append their own below a header)."""

from __future__ import annotations

from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


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
