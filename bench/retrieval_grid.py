"""The kNN-MT mixing weights past tuning's grid (issue 32): greedy chrF of the validation pairs for
each lambda x temperature of a grid, on trained folders with a datastore, k 8.

Tuning (:func:`kformer.tasks.translate.retrieval.tune`) searches its grid by coordinate ascent on
at most 150 validation pairs; when every run chooses a value at the grid's edge, the grid itself
is what to re-derive. This scores the whole cross of ``--lambdas`` and ``--scales`` (temperatures
as multiples of each datastore's ``scale``) on every validation pair of ``--valid`` (never a test
pair), once per folder; then ``k`` 4 and 16 at the setting best on the mean; and the network
alone; and the tuned setting and the network alone at beam 4 (the recipe's beam before
this benchmark). Rows: one per setting, each folder's chrF and their mean; greedy unless a row
names its beam.

    python -m bench.retrieval_grid --valid SPLIT/valid.tsv --folder runs/en-ta runs/en-ta-s1 runs/en-ta-s2
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.harness import machine_summary, record_or_print
from bench.headlines import Headline

LAMBDAS = (0.6, 0.7, 0.8, 0.9)
SCALES = (0.01, 0.03, 0.1, 0.3)
OTHER_KS = (4, 16)
BEAM = 4  # the beam the en-ta recipe decoded with before this benchmark

HEADLINES = (
    Headline("translation", "The retrieval grid past its edges", "valid_chrf",
             name="en-ta with its datastore: greedy vs beam 4 (validation; the recipe's beam)",
             kformer={"system": "^each folder's tuned setting$"},
             baseline={"system": "^each folder's tuned setting, beam 4$"}),
)


def valid_chrf(translator, pairs, store, beam: int = 1) -> float:
    """chrF of ``pairs`` decoded (greedy, or with ``beam``) with the datastore ``store`` (None: without one)."""
    return float(translator.with_retrieval(store).score(pairs, beam=beam)[0]["chrf"])


def at(store, lam: float, scale: float, k: int):
    """``store`` with lambda ``lam``, temperature ``scale`` x its own scale and ``k`` neighbours."""
    return store.with_settings(lam=lam, temperature=round(scale * store.scale, 6), k=k)


def folder_scores(folder: Path, pairs, lambdas, scales) -> tuple[dict, object]:
    """``({(lam, scale, k): chrF}, translator)`` of the cross at k 8, for one folder."""
    from kformer.tasks import translate

    translator = translate.load(folder)
    store = translator.retrieval
    scores = {}
    for scale in scales:
        for lam in lambdas:
            scores[(lam, scale, 8)] = valid_chrf(translator, pairs, at(store, lam, scale, 8))
            print(f"{folder.name}: lambda {lam}, temperature {scale} x scale, k 8: {scores[(lam, scale, 8)]:.2f}", flush=True)
    return scores, translator


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", nargs="+", type=Path, required=True, help="trained folders with a datastore")
    parser.add_argument("--valid", type=Path, required=True, help="the validation pairs (TSV)")
    parser.add_argument("--lambdas", default=",".join(map(str, LAMBDAS)))
    parser.add_argument("--scales", default=",".join(map(str, SCALES)), help="temperatures, times the datastore's scale")
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args(argv)
    from kformer.tasks.translate.pairs import read_pair_data

    pairs = read_pair_data(args.valid)
    lambdas = [float(v) for v in args.lambdas.split(",")]
    scales = [float(v) for v in args.scales.split(",")]
    per_folder, translators = {}, {}
    for folder in args.folder:
        per_folder[folder], translators[folder] = folder_scores(folder, pairs, lambdas, scales)
    mean = {key: sum(s[key] for s in per_folder.values()) / len(per_folder) for key in next(iter(per_folder.values()))}
    lam, scale, _ = max(mean, key=mean.get)
    for folder, translator in translators.items():
        store = translator.retrieval
        for k in OTHER_KS:
            per_folder[folder][(lam, scale, k)] = valid_chrf(translator, pairs, at(store, lam, scale, k))
        per_folder[folder]["tuned"] = valid_chrf(translator, pairs, store)
        per_folder[folder]["without"] = valid_chrf(translator, pairs, None)
        per_folder[folder]["tuned beam"] = valid_chrf(translator, pairs, store, beam=BEAM)
        per_folder[folder]["without beam"] = valid_chrf(translator, pairs, None, beam=BEAM)
    rows = []
    for key in per_folder[args.folder[0]]:
        system = (key if isinstance(key, str) else f"lambda {key[0]}, temperature {key[1]} x scale, k {key[2]}")
        system = {"tuned": "each folder's tuned setting", "without": "without retrieval",
                  "tuned beam": f"each folder's tuned setting, beam {BEAM}",
                  "without beam": f"without retrieval, beam {BEAM}"}.get(system, system)
        row = {"system": system, "valid_chrf": round(sum(s[key] for s in per_folder.values()) / len(per_folder), 2)}
        row.update({folder.name: round(s[key], 2) for folder, s in per_folder.items()})
        rows.append(row)
    tuned = {folder.name: translator.retrieval for folder, translator in translators.items()}
    notes = (f"Command: `python -m bench.retrieval_grid --valid {args.valid} --folder "
             f"{' '.join(str(f) for f in args.folder)} --lambdas {args.lambdas} --scales {args.scales}`. Greedy chrF of all {len(pairs)} validation pairs (never a "
             f"test pair) per folder and their mean (valid_chrf); k 4 and 16 at the setting best on the mean "
             f"(lambda {lam}, temperature {scale} x scale); greedy unless a row names its beam. Each folder's tuned setting: "
             + "; ".join(f"{name} lambda {s.lam}, temperature {s.temperature / s.scale:.3g} x scale, k {s.k}"
                         for name, s in tuned.items()) + f". {machine_summary()}")
    record_or_print(f"The retrieval grid past its edges: {len(args.folder)} folders, {len(pairs)} validation pairs",
                    rows, notes, record=not args.no_record)


if __name__ == "__main__":
    main()
