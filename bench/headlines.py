"""A benchmark's headline, declared by the script that runs it, and the runs it picks.

Every bench script that records results declares, once, at module level::

    HEADLINES = (
        Headline("classification", "IMDB sentiment", "accuracy", kformer={"system": "^kformer"},
                 baseline={"system": "^TF-IDF"}, target=">= 0.89"),
    )

A run recorded in ``bench/results.jsonl`` belongs to a headline of the script its command ran
(``python -m bench.imdb`` -> ``bench/imdb.py``) whose ``title`` matches the start of the run's title
and whose ``command`` (when set) is found in the run's command. So a run needs nothing of its own
to be summarised, and runs recorded before a headline was declared (or changed) are summarised by
today's declaration. This module reads ``HEADLINES`` without importing the script (the scripts
import Keras): the assignment is evaluated with :class:`Headline` as its only name.
"""

from __future__ import annotations

import ast
import operator
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The summary's groups, in its order
TASKS = ("classification", "translation", "arithmetic", "speed, serving and memory")

NUMBER = r"\d+(?:\.\d+)?"
TARGET = re.compile(rf"^(?P<op>>=|<=|==)\s*(?:(?P<times>{NUMBER})x baseline|(?P<baseline>baseline)(?:\s*\+\s*(?P<plus>{NUMBER}))?|"
                    rf"(?P<value>-?{NUMBER}))$")
OPERATORS = {">=": operator.ge, "<=": operator.le, "==": operator.eq}


@dataclass(frozen=True)
class Headline:
    """One row of the summary (or one per value of ``split``).

    ``kformer`` and ``baseline`` map a column to a regular expression its value must match
    (``re.search``; the first matching row is taken). ``target`` is ``">= 0.94"``, ``"<= 0"``,
    ``"== 0"``, ``">= baseline"``, ``">= baseline + 0.01"`` or ``"<= 1.1x baseline"``; its operator also says whether higher
    is better (``lower_is_better`` says so for a headline without a target). ``why`` is one clause
    saying why kformer's row is worse than the baseline's (a dict: one per ``split`` value); the
    summary shows it whenever that is so, and says when it is missing."""

    task: str
    title: str  # regular expression matched at the start of the run's title ("(issue N)" left off)
    metric: str
    kformer: dict[str, str]
    baseline: dict[str, str] | None = None
    target: str | None = None
    why: str | dict[str, str] = ""
    command: str | None = None  # regular expression searched in the run's command: which runs are this benchmark
    split: str | None = None  # a column whose values are separate benchmarks (one run, several datasets)
    name: str | None = None  # the summary's name for it (default: the title up to its colon)
    metric_name: str | None = None  # the metric as the summary names it (default: ``metric``)
    percent: bool | None = None  # show values as percentages (default: by the metric's name)
    lower_is_better: bool = False

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"headline task {self.task!r} is not one of {TASKS}")
        if self.target is not None:
            match = TARGET.match(self.target)
            if match is None:
                raise ValueError(f"headline target {self.target!r}: write '>= 0.94', '<= 1.1x baseline', '== 0'")
            if (match["times"] or match["baseline"]) and self.baseline is None:
                raise ValueError(f"headline target {self.target!r} needs a baseline row")

    @property
    def better_is_lower(self) -> bool:
        return self.target.startswith("<=") if self.target else self.lower_is_better

    def threshold(self, baseline: float | None) -> float | None:
        """The value the target asks kformer's row to reach (None without a target or its baseline)."""
        match = TARGET.match(self.target or "")
        if match is None:
            return None
        if match["value"] is not None:
            return float(match["value"])
        if baseline is None:
            return None
        return baseline * float(match["times"] or 1) + float(match["plus"] or 0)

    def met(self, kformer: float, baseline: float | None) -> bool | None:
        """Whether ``kformer`` meets the target (None: no target, or no baseline to set it)."""
        threshold = self.threshold(baseline)
        if threshold is None:
            return None
        return bool(OPERATORS[TARGET.match(self.target)["op"]](kformer, threshold))

    def worse(self, kformer: float, baseline: float) -> bool:
        return kformer > baseline if self.better_is_lower else kformer < baseline

    def why_for(self, part: str | None) -> str:
        return self.why.get(str(part), "") if isinstance(self.why, dict) else self.why

    def label(self, part: str | None) -> str:
        name = self.name or re.sub(r"\\", "", self.title.split(": ")[0]).rstrip("$")
        return f"{name} · {part}" if part is not None else name


# --- where a run's headlines are declared ------------------------------------------------------------------------


def module_of(command: str) -> str:
    """``bench.en_ta`` for ``python -m bench.en_ta ...`` and for ``python bench/en_ta.py ...``."""
    words = shlex.split(command)
    if "-m" in words:
        return words[words.index("-m") + 1]
    script = next((word for word in words[1:] if word.endswith(".py")), "")
    return ".".join(Path(script).with_suffix("").parts)


def short_title(title: str) -> str:
    return re.sub(r"\s*\(issue \d+\)", "", title).strip()


@cache
def declared(module: str, root: Path = ROOT) -> tuple[Headline, ...]:
    """The ``HEADLINES`` that ``module``'s script declares (none when it has no such script or constant)."""
    path = root.joinpath(*module.split(".")).with_suffix(".py")
    if not module.startswith("bench.") or not path.is_file():
        return ()
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(target, ast.Name) and target.id == "HEADLINES" for target in targets) and node.value:
            code = compile(ast.Expression(node.value), str(path), "eval")
            return tuple(eval(code, {"__builtins__": {}, "Headline": Headline}))  # noqa: S307 - our own file, one name
    return ()


Declared = Callable[[str], Sequence[Headline]]


def applies(headline: Headline, record: dict) -> bool:
    """Whether ``record`` (a run) is a run of ``headline``'s benchmark."""
    return titled(headline, record) and (
        headline.command is None or re.search(headline.command, record["command"]) is not None)


def titled(headline: Headline, record: dict) -> bool:
    """Whether ``record``'s title is ``headline``'s (whatever its command)."""
    return re.match(headline.title, short_title(record["title"])) is not None


def select(rows: Sequence[dict], patterns: dict[str, str] | None, only: dict) -> dict | None:
    """The first row with the values of ``only`` that matches every pattern, or None."""
    if not patterns:
        return None
    for row in rows:
        if all(row.get(key) == value for key, value in only.items()) and all(
            key in row and re.search(pattern, str(row[key])) for key, pattern in patterns.items()
        ):
            return row
    return None


@dataclass(frozen=True)
class Result:
    """A headline's current result: the latest run with its kformer row (``part``: the split value),
    and the baseline's row from that run or from a later run of the baseline alone."""

    headline: Headline
    module: str
    part: str | None
    index: int  # of the run in results.jsonl
    kformer: dict
    baseline: dict | None
    baseline_index: int  # the run the baseline's row is from: this one, or a later rerun of that row alone

    def value(self, row: dict | None) -> float | None:
        value = (row or {}).get(self.headline.metric)
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def current(records: Sequence[dict], headlines_of: Declared = declared) -> list[Result]:
    """Each declared headline's latest result, superseded runs left out, in the summary's order:
    by task, then script, then declaration (and split values as first seen)."""
    latest: dict[tuple, Result] = {}
    for index, record in enumerate(records):
        if record.get("superseded"):
            continue
        module = module_of(record["command"])
        for number, headline in enumerate(headlines_of(module)):
            if not applies(headline, record):
                continue
            parts = dict.fromkeys(row.get(headline.split) for row in record["rows"]) if headline.split else [None]
            for part in parts:
                only = {headline.split: part} if headline.split else {}
                kformer = select(record["rows"], headline.kformer, only)
                baseline = select(record["rows"], headline.baseline, only)
                key = (module, number, part)
                if kformer is not None:
                    latest[key] = Result(headline, module, part, index, kformer, baseline, index)
                elif baseline is not None and key in latest:  # a rerun of the baseline's row alone
                    latest[key] = replace(latest[key], baseline=baseline, baseline_index=index)
    order = {key: position for position, key in enumerate(latest)}  # split values as first seen
    return [latest[key] for key in sorted(latest, key=lambda key: (
        TASKS.index(latest[key].headline.task), key[0], key[1], order[key]))]


def undeclared(records: Sequence[dict], headlines_of: Declared = declared) -> dict[tuple[str, str], int]:
    """(script, title) -> its latest run, for runs (not superseded) that no declared headline covers."""
    found: dict[tuple[str, str], int] = {}
    for index, record in enumerate(records):
        module = module_of(record["command"])
        if not record.get("superseded") and not any(titled(headline, record) for headline in headlines_of(module)):
            found[(module, short_title(record["title"]))] = index
    return found


def baseline_label(title: str, command: str, rows: Sequence[dict]) -> str | None:
    """The ``system`` of the baseline row the script's headline picks from a run (what
    ``record_results`` stores as the run's baseline when it is given none)."""
    record = {"title": title, "command": command, "rows": list(rows)}
    for result in current([record]):
        if result.baseline is not None:
            return str(result.baseline.get("system") or result.baseline.get("run") or "")
    return None
