"""English->Tamil from the command line (issue 32): a folder ``kformer train translate --recipe en-ta
--max-minutes 30`` wrote from all seven corpora, scored on ``bench/en_ta.py``'s two test hold-outs
beside a translation memory and a random floor built from the same training pairs.

The folder is trained by the command itself, as a user runs it (timed from outside, e.g. with
``/usr/bin/time``), on the files ``python -m bench.en_ta_splits --write SPLIT`` writes::

    python -m bench.en_ta_splits --write SPLIT
    /usr/bin/time -f %e kformer train translate --data SPLIT/train --valid SPLIT/valid.tsv \\
        --test SPLIT/test.tsv --recipe en-ta --max-minutes 30 --out runs/en-ta
    python -m bench.en_ta_cli --folder runs/en-ta --wall-seconds S

Several folders (the same command with ``--seed`` 0, 1, 2: ``--folder A B C --wall-seconds SA SB SC``)
give each seed's rows and, first, their mean with the sample sd of each test chrF (the final row of
issue 32: the recipe over 3 seeds). With ``--recorded`` the folders' rows are not decoded again but read from
the runs that scored each folder alone (``bench/results.jsonl``): seeds scored one by one, averaged.

Rows: the folder decoded greedily with its datastore and without it (TICO-19 test documents and
Joshua IPC test sentences, ``tico_*`` / ``ipc_*``; ``*_s_per_sent``: decode seconds per sentence,
cold: each decode shape compiles once, as a ``kformer evaluate`` does), the test decoding the run
itself did within its budget (the recipe's beam with the datastore, on the pairs it had time
for), and ``bench.en_ta``'s ``memory`` and ``floor`` rows. The phases column copies
``metrics.json["phases"]`` (seconds, and what was cut).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import time
from pathlib import Path

from bench.harness import record_results, results_table
from bench.headlines import Headline

TITLE = "English->Tamil from the command line: all seven corpora, --max-minutes 30"
# This benchmark's rows in BENCHMARKS.md's summary (bench/headlines.py says how they are read); several
# seeds: the mean row (a seed's own rows end "(seed N)")
HEADLINES = (
    Headline("translation", r"English->Tamil from the command line: all seven corpora, --max-minutes 30$", "tico_chrf",
             name="English->Tamil, all corpora, one CLI command of 30 minutes, TICO-19 test documents",
             metric_name="chrF", kformer={"system": r"greedy \+ kNN-MT(, mean of \d+ seeds)?$"}, baseline={"system": r"^memory$"},
             target=">= 27"),
    Headline("translation", r"English->Tamil from the command line: all seven corpora, --max-minutes 30$", "ipc_chrf",
             name="English->Tamil, all corpora, one CLI command of 30 minutes, Joshua IPC test sentences",
             metric_name="chrF", kformer={"system": r"greedy \+ kNN-MT(, mean of \d+ seeds)?$"}, baseline={"system": r"^memory$"},
             target=">= baseline"),
    Headline("translation", r"English->Tamil from the command line: all seven corpora, --max-minutes 30, ", "valid_chrf",
             name="English->Tamil, all corpora, one CLI command of 30 minutes, a variant of the recipe (validation)",
             metric_name="chrF", kformer={"system": r"greedy \+ kNN-MT(, mean of \d+ seeds)?$"},
             baseline={"system": r"^memory$"}, why="a variant (--variant) is compared with the recipe on validation; its test columns only report"),
)


def folder_rows(folder: Path, split, wall_seconds: float | None) -> list[dict]:
    """The folder's rows: greedy with and without its datastore, and the run's own test decoding."""
    from bench.en_ta import _part_scores, _with_valid_mean
    from kformer.metrics import translation_scores
    from kformer.tasks import translate

    metrics = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
    phases = "; ".join(f"{p['name']} {p['seconds'] or 0:.0f} s" + (f" ({p['cut']})" if p["cut"] else "")
                       for p in metrics["phases"])
    translator = translate.load(folder)
    store = translator.retrieval
    common = {"seed": metrics["recipe"].get("seed", 0), "train_pairs": metrics["splits"]["train"], "epochs": metrics["epochs_run"], "wall_s": wall_seconds,
              "knn_entries": None if store is None else store.entries, "phases": phases}
    rows = []
    for with_store in ((True, False) if store is not None else (False,)):
        row = {"system": "kformer en-ta (CLI), greedy" + (" + kNN-MT" if with_store else " without retrieval"),
               **common}
        for prefix, pairs in split.test.items():
            start = time.perf_counter()
            hypotheses = translator.translate([p.source for p in pairs], beam=1, retrieval=with_store)
            row |= _part_scores(prefix, hypotheses, pairs, time.perf_counter() - start)
        for name, pairs in split.valid.items():  # what compares two runs' settings: validation, not the test columns
            row |= _part_scores(f"valid_{name}", translator.translate([p.source for p in pairs], beam=1,
                                                                      retrieval=with_store), pairs)
        rows.append(_with_valid_mean(row, split))
    decoded = {r["source"]: r for r in json.loads((folder / "test_translations.json").read_text(encoding="utf-8"))}
    own = {"system": f"kformer en-ta (CLI), its own test decoding (beam {metrics['test']['beam']})", **common}
    for prefix, pairs in split.test.items():
        found = [decoded[p.source] for p in pairs if p.source in decoded]
        if found:
            scores = translation_scores([r["translation"] for r in found], [r["reference"] for r in found])
            own |= {f"{prefix}_chrf": scores["chrf"], f"{prefix}_bleu": scores["bleu"], f"{prefix}_scored": len(found)}
    return [*rows, own]


def recorded_rows(folder: Path, results: Path | None = None) -> list[dict]:
    """The folder's own rows (not the baselines') from the latest run of this benchmark in
    ``bench/results.jsonl`` (``results``) that scored that folder alone: what ``--recorded``
    averages instead of decoding the folder again (its greedy decodes are deterministic; its
    seconds a sentence are that run's)."""
    from bench.harness import RESULTS_FILE

    rows = None
    for line in (results or RESULTS_FILE).read_text(encoding="utf-8").splitlines():
        record = json.loads(line) if line.strip() else {}
        if not record.get("title", "").startswith(TITLE):
            continue
        words = shlex.split(record["command"])
        scored = _parser().parse_known_args(words[words.index("bench.en_ta_cli") + 1:])[0].folder
        if [Path(f).resolve() for f in scored] == [folder.resolve()]:
            rows = [row for row in record["rows"] if row["system"].startswith("kformer")]
    if rows is None:
        raise SystemExit(f"--recorded: no run of bench.en_ta_cli scored {folder} alone in bench/results.jsonl; "
                         "score it first (without --recorded)")
    return rows


def seeds_rows(runs: list[list[dict]]) -> list[dict]:
    """One folder's rows as they are; several folders' (one per seed): the mean of each decoding
    over the seeds (``bench.en_ta.mean_row``: sd of each test chrF), then every seed's rows with
    ``(seed N)`` after their system."""
    from bench.en_ta import mean_row

    if len(runs) == 1:
        return runs[0]
    if len({tuple(row["system"] for row in run) for run in runs}) > 1:
        raise SystemExit("the folders decode differently (one kept no datastore): their rows cannot be averaged")
    walls_known = all(run[0]["wall_s"] is not None for run in runs)
    means = [mean_row(f"{row['system']}, mean of {len(runs)} seeds", [run[i] for run in runs])
             | {"wall_s": statistics.fmean(run[i]["wall_s"] for run in runs) if walls_known else None,
                "epochs": "/".join(str(run[i]["epochs"]) for run in runs)}
             for i, row in enumerate(runs[0]) if "greedy" in row["system"]]
    return means + [row | {"system": f"{row['system']} (seed {row['seed']})"} for run in runs for row in run]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, nargs="+", required=True,
                        help="the folder the CLI command wrote (several: one per --seed, and their mean)")
    parser.add_argument("--wall-seconds", type=float, nargs="+", default=None,
                        help="the command's wall time, measured outside (one per folder)")
    parser.add_argument("--variant", default="", help="the flags the run added to the recipe's command, e.g. "
                        "'--encoder-learning-rate 3e-5' (its own title: the recipe's rows in the summary stay)")
    parser.add_argument("--note", default="", help="a sentence appended to the notes (what else the run showed)")
    parser.add_argument("--recorded", action="store_true",
                        help="each folder's rows as recorded when it was scored alone (bench/results.jsonl), "
                        "not decoded again: the mean of seeds scored one by one")
    parser.add_argument("--no-record", action="store_true", help="print, do not append to BENCHMARKS.md")
    return parser


def main() -> None:
    args = _parser().parse_args()
    from bench.en_ta import SYSTEMS, baseline_row
    from bench.en_ta_splits import split as make_split

    if args.wall_seconds and len(args.wall_seconds) != len(args.folder):
        raise SystemExit(f"--wall-seconds: {len(args.wall_seconds)} values for {len(args.folder)} folders")
    split = make_split()
    walls = args.wall_seconds or [None] * len(args.folder)
    if args.recorded:
        runs = [recorded_rows(folder) for folder in args.folder]
    else:
        runs = [folder_rows(folder, split, wall) for folder, wall in zip(args.folder, walls, strict=True)]
    rows = seeds_rows(runs)
    rows += [baseline_row(name, SYSTEMS[name], split) for name in ("memory", "memory-base", "floor")]
    rows = [{k: v for k, v in row.items() if not k.startswith("valid_") or k == "valid_chrf"} for row in rows]
    notes = ("The folder was trained by `kformer train translate --data SPLIT/train --valid SPLIT/valid.tsv --test "
             "SPLIT/test.tsv --recipe en-ta --max-minutes 30` on the files `python -m bench.en_ta_splits --write SPLIT` "
             "writes (wall_s: that command's wall time, launch to exit, measured outside it (/usr/bin/time or `date` "
             "before and after), nothing else running). Test: TICO-19 470 pairs of held-out documents (tico_*), Joshua IPC 300 held-out seg_ids "
             "(ipc_*); no test pair chose anything (the run's validation pairs, 168 TICO-19 + 150 IPC, chose its "
             "early stopping and the kNN-MT weights; valid_chrf: the mean of the two validation parts' chrF, "
             "greedy, what compares two runs' settings). memory: TF-IDF nearest training source over all the run's "
             "training pairs; memory-base: over TICO-19 + Tatoeba only; floor: a random training target. "
             "Targets (issue 32): TICO-19 chrF >= 27 and >= memory; Joshua IPC >= memory." + (
                 f" {args.note}" if args.note else "") + (
                 f" The {len(args.folder)} folders: that command with --seed 0 (the default), 1, ...; each mean "
                 "row averages the seeds' rows of its decoding (*_sd: the sample sd over the seeds)." + (
                     " Each seed's rows are those recorded when its folder was scored alone (its own section), "
                     "not decoded again (--recorded)." if args.recorded else "")
                 if len(args.folder) > 1 else ""))
    if args.no_record:
        print(results_table(rows, "memory", ("tico_chrf", "ipc_chrf")) + "\n\n" + notes)
        return
    title = f"{TITLE}, {args.variant}" if args.variant else TITLE
    record_results(title, rows, notes=notes, baseline="memory", ratio_keys=("tico_chrf", "ipc_chrf"))


if __name__ == "__main__":
    main()
