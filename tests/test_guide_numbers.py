"""What README.md and the guides in docs/ say about measurements is what bench/results.jsonl holds.

The guides point at BENCHMARKS.md rather than quote numbers. The few quotes they keep are listed in
``QUOTES``, each tied to a benchmark's headline (the row BENCHMARKS.md's summary shows, from the
benchmark's latest run): a new run that changes the number fails here until the quote is updated.
A number written beside a metric (``BLEU 37.0``, ``91 % accuracy``, ``700 texts/s``, ``3× faster``)
that is not in ``QUOTES`` fails too. Every ``BENCHMARKS.md, "Title"`` reference names a section.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from bench import headlines, summary

ROOT = Path(__file__).resolve().parent.parent
GENERATED = {"settings.md", "benchmarks-history.md"}  # written by programs, not guides
GUIDES = [ROOT / "README.md", *(path for path in sorted((ROOT / "docs").glob("*.md")) if path.name not in GENERATED)]

NUMBER = r"\d[\d,]*(?:\.\d+)?"
METRIC = r"(?:BLEU|chrF|AUROC|accuracy|exact match|macro[- ]F1|recall)"
MEASUREMENT = re.compile(
    rf"\b{METRIC}(?: of| at)? {NUMBER}(?: ?%)?"  # BLEU 37.0, accuracy of 91.2 %
    rf"|{NUMBER} ?% (?:{METRIC})"  # 91 % accuracy
    rf"|{NUMBER} (?:texts|tokens|sentences|requests|req|examples)(?:/s| per second)"  # 771 texts/s
    rf"|{NUMBER} ?(?:×|x|times) (?:faster|slower|as fast)"  # 4× faster
)


@dataclass(frozen=True)
class Quote:
    """``text`` appears in ``guide``; its number is ``side``'s value ("kformer" or "baseline") of
    the headline named ``headline`` that ``module`` declares, rounded to ``decimals``."""

    guide: str
    text: str
    module: str
    headline: str
    side: str
    decimals: int


QUOTES = (
    Quote("README.md", "reaches BLEU 38.9 (beam 4)", "bench.en_es", "English->Spanish (Anki), 30 minutes, beam 4",
          "kformer", 1),
    Quote("README.md", "against 22.7 for a translation memory", "bench.en_es",
          "English->Spanish (Anki), 30 minutes, beam 4", "baseline", 1),
)


def prose(path: Path) -> str:
    """The file without its fenced code blocks (examples, not claims)."""
    return re.sub(r"^(```+|~~~+).*?^\1", "", path.read_text(encoding="utf-8"), flags=re.M | re.S)


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


@pytest.mark.parametrize("quote", QUOTES, ids=lambda quote: f"{quote.guide}: {quote.text}")
def test_each_quoted_number_is_the_current_result_of_its_benchmark(quote):
    assert quote.text in flat(prose(ROOT / quote.guide)), f"{quote.guide} no longer says {quote.text!r}: update QUOTES"
    results = [result for result in headlines.current(summary.read_results())
               if result.module == quote.module and result.headline.label(result.part) == quote.headline]
    assert len(results) == 1, f"no current headline {quote.headline!r} in {quote.module}"
    result = results[0]
    value = result.value(result.kformer if quote.side == "kformer" else result.baseline)
    if summary.shows_percent(result.headline):
        value *= 100
    quoted = re.search(NUMBER, quote.text).group(0).replace(",", "")
    assert f"{value:.{quote.decimals}f}" == quoted, (
        f"{quote.guide} quotes {quoted} but the latest run of {quote.headline!r} measured {value:.{quote.decimals}f}: "
        "update the guide (or point it at BENCHMARKS.md instead) and QUOTES")


def test_guides_quote_no_measurement_that_is_not_tied_to_a_recorded_run():
    untied = []
    for path in GUIDES:
        text = flat(prose(path))
        allowed = [quote.text for quote in QUOTES if quote.guide == path.relative_to(ROOT).as_posix()]
        for match in MEASUREMENT.finditer(text):
            if not any(match.group(0) in quote and quote in text for quote in allowed):
                untied.append(f"{path.relative_to(ROOT)}: {match.group(0)!r}")
    assert untied == [], ("guides quote measurements that no QUOTES entry ties to bench/results.jsonl; point at "
                          f"BENCHMARKS.md instead, or add a Quote: {untied}")


def test_every_benchmarks_reference_in_a_guide_names_a_section_of_benchmarks_md():
    titles = [summary.headlines.short_title(line[3:]) for line in
              (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8").splitlines() if line.startswith("## ")]
    missing = []
    for path in GUIDES:
        for name in re.findall(r'BENCHMARKS\.md\)?,? "([^"]+)"', flat(prose(path))):
            if not any(title.startswith(name.rstrip(".")) for title in titles):
                missing.append(f"{path.relative_to(ROOT)}: {name!r}")
    assert missing == []
