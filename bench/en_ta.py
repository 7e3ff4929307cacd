"""English->Tamil on every corpus (issue 32): corpora added in turn, tags, encoder, retrieval, on two hold-outs.

    flock /tmp/kformer-bench.lock .venv/bin/python -m bench.en_ta --rows runs/en-ta-rows.jsonl [--systems ...]

The split is ``bench/en_ta_splits.py``'s: TICO-19 held out by document (test ~470 pairs, validation
~170) and Joshua IPC by ``seg_id`` (300 test and 150 validation sentences, each scored once against
its one Tamil reference); every other pair of the seven corpora trains, less any pair whose
normalised source is a held-out one. Every row is scored on both test hold-outs (``tico_*`` and
``ipc_*``: chrF, BLEU, greedy decode seconds per sentence) and both validation hold-outs
(``valid_tico_chrf``, ``valid_ipc_chrf``, and their mean ``valid_chrf``, which alone chooses: the
kNN-MT weights and the final row). Test sentences choose nothing.

Systems (``--systems``, comma-separated; default all, in this order):

- ``memory``: a translation memory (TF-IDF word 1-2 grams, nearest training source -> its target)
  of all the training pairs; ``memory-base``: the same of TICO-19 + Tatoeba only; ``floor``: a
  random training target per sentence;
- ``add-tico19-tatoeba``, ``add-joshua-ipc``, ``add-bible``, ``add-nlpc-uom``, ``add-glossary``,
  ``add-tico19-terms``: the ``en-ta`` recipe (frozen MiniLM encoder, kNN-MT, corpus weights by
  ``auto``) trained on the corpora up to and including that one (the last: all seven), tags off;
- ``tags``: all corpora with ``corpus_tags`` on (held-out pairs decoded with their corpus's tag);
- ``fine-tuned``: all corpora, the MiniLM encoder fine-tuned (``encoder_learning_rate`` 3e-5);
- ``no-knn``: ``add-tico19-terms``'s folder decoded without retrieval (no retraining);
- ``final``: the system of best ``valid_chrf`` among the trained rows there are (this sitting's
  and ``--rows``'), or ``--final NAME``, with ``--seeds`` seeds (seed 0 is that row's own
  training), and the mean and sd of the seeds.

Each training has at most ``--minutes`` (default 30) of ``model.fit``'s clock. ``--rows FILE``
keeps every finished row (one JSON line each); a rerun skips the rows already there, so the table
can be made over several sittings, and ``--work DIR`` keeps the trained folders (a folder already
there is loaded, not retrained). ``--limit N`` (smoke runs): at most N training pairs per corpus.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.harness import Timer, append_rows, read_rows, record_results, results_table, sd
from bench.headlines import Headline

# This benchmark's rows in BENCHMARKS.md's summary (bench/headlines.py says how they are read; written
# out, as it evaluates them alone). The last two count full runs only: no --limit, --minutes 30 or its default.
# The first two read the runs of the earlier script (one TICO-19 hold-out, three systems), kept readable.
HEADLINES = (
    Headline("translation", r"English->Tamil translation \(TICO-19, document hold-out\)$", "chrf",
             command=r"--minutes 30\b(?!.*--(recipe|extra))", name="English->Tamil (TICO-19), 30 minutes",
             kformer={"system": r"^kformer (?!.*--curriculum).*, greedy$"},
             baseline={"system": "^translation memory"}, target=">= 30",
             why="2,804 training pairs are too few for a model from scratch to beat retrieval from them"),
    Headline("translation", r"English->Tamil translation \(TICO-19, document hold-out\) \+ Joshua IPC", "chrf",
             command=r"--minutes 30\b(?!.*--(recipe|extra))", name="English->Tamil (TICO-19 + Joshua IPC), 30 minutes",
             kformer={"system": r"^kformer (?!.*--curriculum).*, greedy$"},
             baseline={"system": "^translation memory"}, target=">= 30",
             why="the 14,000 added pairs are Wikipedia sentences, not TICO-19's COVID-19 documents"),
    Headline("translation", r"English->Tamil corpora", "tico_chrf", command=r"^(?!.*--(limit|minutes (?!30\b)))",
             name="English->Tamil, all corpora, TICO-19 test documents", metric_name="chrF",
             kformer={"system": r"^final: .*mean of"}, baseline={"system": r"^memory$"}, target=">= 27"),
    Headline("translation", r"English->Tamil corpora", "ipc_chrf", command=r"^(?!.*--(limit|minutes (?!30\b)))",
             name="English->Tamil, all corpora, Joshua IPC test sentences", metric_name="chrF",
             kformer={"system": r"^final: .*mean of"}, baseline={"system": r"^memory$"}, target=">= baseline"),
)
TITLE = "English->Tamil corpora: ablation, tags, encoder, kNN-MT (TICO-19 documents, Joshua IPC seg_ids)"
RATIO_KEYS = ("tico_chrf", "ipc_chrf")
FINE_TUNE_RATE = 3e-5  # the setting's own suggestion (settings.py); not tuned here


@dataclass(frozen=True)
class System:
    """One row: a baseline (``kind`` memory or floor) or a trained model (``kind`` model) over
    ``corpora`` with ``settings`` on the en-ta recipe, decoded with or without ``knn``."""

    kind: str
    corpora: tuple[str, ...]
    settings: dict = field(default_factory=dict, hash=False)
    knn: bool = True

    def training_key(self) -> str:
        """What identifies a training (two systems with one key share the folder)."""
        settings = ",".join(f"{k}={v}" for k, v in sorted(self.settings.items()))
        return f"{'+'.join(c.removeprefix('en-ta-').replace('/', '-') for c in self.corpora)}[{settings}]"


def _systems() -> dict[str, System]:
    from bench.en_ta_splits import CORPORA

    names = list(CORPORA)
    steps = {"add-tico19-tatoeba": 2, "add-joshua-ipc": 3, "add-bible": 4, "add-nlpc-uom": 5, "add-glossary": 6,
             "add-tico19-terms": 7}
    every = tuple(names)
    systems = {"memory": System("memory", every), "memory-base": System("memory", tuple(names[:2])),
               "floor": System("floor", every)}
    systems |= {name: System("model", tuple(names[:n])) for name, n in steps.items()}
    systems |= {"tags": System("model", every, {"corpus_tags": True}),
                "fine-tuned": System("model", every, {"encoder_learning_rate": FINE_TUNE_RATE}),
                "no-knn": System("model", every, knn=False)}
    return systems


SYSTEMS = _systems()
ORDER = (*SYSTEMS, "final")


# --- scoring --------------------------------------------------------------------------------------------------


def _part_scores(prefix: str, hypotheses, pairs, seconds: float | None = None) -> dict:
    from kformer.metrics import translation_scores

    scores = translation_scores(hypotheses, [p.target for p in pairs])
    if prefix.startswith("valid_"):  # validation: the chrF that chooses, nothing else
        return {f"{prefix}_chrf": scores["chrf"]}
    row = {f"{prefix}_chrf": scores["chrf"], f"{prefix}_bleu": scores["bleu"]}
    if seconds is not None:
        row[f"{prefix}_s_per_sent"] = seconds / max(len(pairs), 1)
    return row


def _with_valid_mean(row: dict, split) -> dict:
    row["valid_chrf"] = statistics.fmean(row[f"valid_{name}_chrf"] for name in split.valid)
    return row


def _parts(split):
    """``(column prefix, pairs)`` of the test then the validation hold-outs."""
    return [*split.test.items(), *((f"valid_{name}", pairs) for name, pairs in split.valid.items())]


def baseline_row(name: str, system: System, split) -> dict:
    """The translation memory's or the random floor's row, from the training pairs of ``system``."""
    import numpy as np

    train = split.train_of(system.corpora)
    row = {"system": name, "seed": 0, "train_pairs": len(train)}
    if system.kind == "floor":
        rng = np.random.default_rng(0)
        for prefix, pairs in _parts(split):
            row |= _part_scores(prefix, [train[i].target for i in rng.integers(0, len(train), len(pairs))], pairs)
        return _with_valid_mean(row | {"decode": "random (seed 0)"}, split)
    from sklearn.feature_extraction.text import TfidfVectorizer

    with Timer() as timer:
        vectorizer = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, token_pattern=r"(?u)\b\w+\b")
        memory = vectorizer.fit_transform([p.source for p in train])
    row["train_s"] = timer.seconds
    for prefix, pairs in _parts(split):
        with Timer() as timer:
            nearest = np.asarray((vectorizer.transform([p.source for p in pairs]) @ memory.T).argmax(axis=1)).ravel()
        row |= _part_scores(prefix, [train[i].target for i in nearest], pairs, timer.seconds)
    return _with_valid_mean(row | {"decode": "nearest neighbour"}, split)


def decoded_row(name: str, translator, split, knn: bool, seed: int, info: dict) -> dict:
    """A trained system's row: greedy decoding of every hold-out, each pair with its corpus's tag
    when the model has tags (``corpus_domains``), with or without the kNN-MT datastore."""
    row = {"system": name, "seed": seed, **info}
    for prefix, pairs in _parts(split):
        start = time.perf_counter()
        hypotheses = translator.translate([p.source for p in pairs], beam=1, retrieval=knn,
                                          domain=translator.corpus_domains(pairs))
        row |= _part_scores(prefix, hypotheses, pairs, time.perf_counter() - start)
    store = translator.retrieval if knn else None
    if store is not None:
        row |= {"knn_entries": store.entries, "lambda": store.lam, "temperature": round(store.temperature, 4),
                "k": store.k}
    row["decode"] = "greedy" + (" + kNN-MT" if store is not None else "")
    return _with_valid_mean(row, split)


# --- training ---------------------------------------------------------------------------------------------------


class Trainer:
    """Trains each (corpora, settings, seed) once into ``work`` (a folder already complete there is
    loaded instead) and keeps the loaded translators of this sitting."""

    def __init__(self, split, minutes: float, work: Path, knn_tune: int = 150):
        self.split, self.minutes, self.work, self.knn_tune = split, minutes, work, knn_tune
        self.loaded: dict[str, tuple] = {}

    def translator(self, system: System, seed: int):
        """``(translator, info)``: the trained folder of ``system`` and ``seed``, with a kNN-MT
        datastore of its training pairs (weights chosen on the validation pairs) when ``system.knn``."""
        import json

        from kformer.tasks import translate

        key = f"{system.training_key()}-seed{seed}"
        if key not in self.loaded:
            folder = self.work / key.replace("[", "_").replace("]", "").replace("=", "-").replace(",", "_")
            if not (folder / "kformer.json").is_file():
                self._train(system, seed, folder)
            metrics = json.loads((folder / "metrics.json").read_text(encoding="utf-8"))
            fit_file = folder.with_name(folder.name + ".fit.json")
            fit_seconds = json.loads(fit_file.read_text(encoding="utf-8")) if fit_file.is_file() else None
            auto = metrics.get("auto") or {}
            weights = (auto.get("corpus_weights") or {}).get("value") or {}
            info = {"train_pairs": metrics["splits"]["train"], "train_s": fit_seconds,
                    "epochs": metrics["epochs_run"], "params": metrics["parameters"],
                    "weights": " ".join(f"{k.removeprefix('en-ta-')}:{v:.2g}" for k, v in weights.items())}
            self.loaded[key] = (translate.load(folder), info, {})
        translator, info, with_knn = self.loaded[key]
        if not system.knn:
            return translator, dict(info)
        if "store" not in with_knn:
            with Timer() as timer:
                with_knn["store"] = translator.build_retrieval(self.split.train_of(system.corpora),
                                                               valid=self.split.valid_pairs(), limit=self.knn_tune,
                                                               write=False)
            with_knn["seconds"] = timer.seconds
        return with_knn["store"], {**info, "knn_setup_s": with_knn["seconds"]}

    def _train(self, system: System, seed: int, folder: Path) -> None:
        import json

        from kformer.cli.progress import progress_printer
        from kformer.config import make_config
        from kformer.tasks import translate

        # retrieval is built by the bench (so one folder decodes both ways); beam 1: the bench decodes itself
        config = make_config(translate.TranslateConfig, "translate", "en-ta",
                             {"max_minutes": self.minutes, "beam": 1, "seed": seed, "retrieval": "off",
                              **system.settings})
        valid = self.split.valid_pairs()
        print(f"+ en-ta {system.training_key()} seed {seed}, {self.minutes:g} min -> {folder}", flush=True)
        printer, fit = progress_printer(interactive=False), {}

        def progress(event) -> None:
            fit["seconds"] = event.seconds  # the last event: fit's "done", as bench/en_es.py
            printer(event)

        # test=: 16 validation pairs, only so that train() holds nothing out of training (the bench scores itself)
        translate.train(config, self.split.train_of(system.corpora), folder, valid=valid, test=valid[:16],
                        progress=progress, command=[sys.executable, *sys.argv])
        # model.fit's clock (its last progress event), beside the folder: the folder stays as kformer wrote it
        folder.with_name(folder.name + ".fit.json").write_text(json.dumps(fit.get("seconds")), encoding="utf-8")


# --- the table ----------------------------------------------------------------------------------------------------


COLUMNS = ("system", "seed", "seeds", "tico_chrf", "tico_chrf_sd", "tico_bleu", "ipc_chrf", "ipc_chrf_sd", "ipc_bleu",
           "valid_tico_chrf", "valid_ipc_chrf", "valid_chrf", "tico_s_per_sent", "ipc_s_per_sent", "decode",
           "train_pairs", "train_s", "epochs")
MEAN_KEYS = ("tico_chrf", "tico_bleu", "tico_s_per_sent", "ipc_chrf", "ipc_bleu", "ipc_s_per_sent",
             "valid_tico_chrf", "valid_ipc_chrf", "valid_chrf", "train_s")


def mean_row(name: str, rows: list[dict]) -> dict:
    """The mean of ``rows`` (one per seed), with the sample sd of each hold-out's test chrF and BLEU."""
    row = {"system": name, "seed": ",".join(str(r["seed"]) for r in rows), "seeds": len(rows)}
    for key in MEAN_KEYS:
        values = [r[key] for r in rows if isinstance(r.get(key), int | float)]
        if values:
            row[key] = statistics.fmean(values)
    for key in ("tico_chrf", "tico_bleu", "ipc_chrf", "ipc_bleu"):
        row[f"{key}_sd"] = sd([r[key] for r in rows])
    row["decode"] = rows[0].get("decode", "")
    return row


def choose_final(rows: list[dict], named: str | None) -> str:
    """The system the final row repeats: ``named``, else the trained row of best ``valid_chrf``."""
    if named:
        return named
    trained = [r for r in rows if r["system"] in SYSTEMS and SYSTEMS[r["system"]].kind == "model"]
    if not trained:
        raise SystemExit("final: no trained row to choose from yet; run some systems first (or give --final NAME)")
    return max(trained, key=lambda r: r["valid_chrf"])["system"]


def run(systems: list[str], split, args) -> list[dict]:
    """The rows asked for (those in ``--rows`` already are not run again), in :data:`ORDER`."""
    rows = read_rows(args.rows)
    done = {(r["system"], r.get("seed", 0)) for r in rows}
    work = args.work or Path(tempfile.mkdtemp(prefix="kformer-bench-en-ta-"))
    trainer = Trainer(split, args.minutes, work, args.knn_tune)

    def add(row: dict) -> None:
        rows.append(row)
        append_rows(args.rows, [row])
        print(results_table([row]), flush=True)

    for name in systems:
        if name == "final" or (name, 0) in done:
            continue
        system = SYSTEMS[name]
        if system.kind == "model":
            translator, info = trainer.translator(system, 0)
            add(decoded_row(name, translator, split, system.knn, 0, info))
        else:
            add(baseline_row(name, system, split))
    if "final" in systems:
        chosen = choose_final(rows, args.final)
        print(f"+ final: {chosen} (valid chrF)", flush=True)
        system, label = SYSTEMS[chosen], f"final: {chosen}"
        seed_rows = [r for r in rows if r["system"] == chosen and r.get("seed", 0) == 0]
        for seed in range(1 if seed_rows else 0, args.seeds):
            row = next((r for r in rows if r["system"] == label and r.get("seed") == seed), None)
            if row is None:
                translator, info = trainer.translator(system, seed)
                row = decoded_row(label, translator, split, system.knn, seed, info)
                add(row)
            seed_rows.append(row)
        rows = [r for r in rows if not r["system"].startswith("final: ") or "mean of" not in r["system"]]
        rows.append(mean_row(f"{label}, mean of {len(seed_rows)} seeds", seed_rows))
    order = {name: i for i, name in enumerate(ORDER)}
    rows = [{**{key: row[key] for key in COLUMNS if key in row}, **row} for row in rows]  # one column order
    return sorted(rows, key=lambda r: (order.get(r["system"], len(ORDER)), isinstance(r.get("seed", 0), str),
                                       str(r.get("seed", 0)).zfill(6)))


def notes(split, args, minutes: float) -> str:
    sizes = split.sizes()
    train = ", ".join(f"{name.removeprefix('en-ta-')} {n:,}" for name, n in sizes["train"].items())
    removed = ", ".join(f"{name.removeprefix('en-ta-')} {n}" for name, n in sizes["removed"].items()) or "none"
    return (
        f"Training pairs per corpus: {train} ({len(split.train):,} in all; removed because their normalised source is "
        f"a held-out one: {removed}). Test: TICO-19 {sizes['test']['tico']} pairs from {len(split.test_documents)} "
        f"held-out documents (tico_*), Joshua IPC {sizes['test']['ipc']} sentences held out by seg_id, each with "
        "its first English translation as the source and its one Tamil reference (ipc_*; in en->ta the four crowd "
        "translations are sources, so there are no multiple references). Validation: TICO-19 "
        f"{sizes['valid']['tico']} pairs of other documents, Joshua IPC {sizes['valid']['ipc']} other seg_ids; "
        f"valid_chrf (their mean) chose the kNN-MT weights (first {args.knn_tune} validation pairs, both kinds "
        "interleaved) and the final row; no test sentence chose anything. The validation pairs given to training (early stopping) "
        "carry no corpus tag (kformer's given --valid pairs are neutral); the bench decodes every held-out pair "
        "with its corpus's tag when the model has tags. en-ta recipe: all-MiniLM-L6-v2 encoder, frozen (fine-tuned row: "
        f"encoder_learning_rate {FINE_TUNE_RATE:g}), corpus "
        f"weights by auto (temperature sampling; the weights column); each model trained at most {minutes:g} min "
        "of model.fit on this CPU; greedy decoding; *_s_per_sent: decode seconds per sentence (with kNN-MT: "
        "with the datastore). sacrebleu corpus BLEU/chrF, one reference. sd: sample sd over seeds. Targets "
        "(issue 32): TICO-19 test chrF >= 27 and >= the memory; Joshua IPC test >= the memory."
        + (f" Smoke run: --limit {args.limit} pairs per corpus." if args.limit else "")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", default=",".join(ORDER), help=f"comma-separated, of {', '.join(ORDER)}")
    parser.add_argument("--minutes", type=float, default=30.0, help="training budget of each model (default 30)")
    parser.add_argument("--seeds", type=int, default=3, help="seeds of the final row (default 3)")
    parser.add_argument("--final", default=None, choices=[n for n, s in SYSTEMS.items() if s.kind == "model"],
                        help="the final row's system (default: the trained row of best valid_chrf)")
    parser.add_argument("--rows", type=Path, default=None, metavar="JSONL",
                        help="append each finished row here; rows already in it are not run again and join the table")
    parser.add_argument("--work", type=Path, default=None, help="keep trained folders here (reused when complete)")
    parser.add_argument("--knn-tune", type=int, default=150, metavar="N",
                        help="validation pairs the kNN-MT weights are chosen on (default 150, kformer's; each of "
                        "the ~18 settings tried decodes them all)")
    parser.add_argument("--limit", type=int, default=None, help="at most N training pairs per corpus (smoke runs)")
    parser.add_argument("--no-record", action="store_true", help="print, do not append to BENCHMARKS.md")
    args = parser.parse_args()
    systems = [name.strip() for name in args.systems.split(",") if name.strip()]
    unknown = sorted(set(systems) - set(ORDER))
    if unknown:
        parser.error(f"unknown systems: {', '.join(unknown)}")
    if not 0 < args.minutes <= 30 or args.seeds < 1:
        parser.error("--minutes must be in (0, 30] and --seeds at least 1")
    from bench.en_ta_splits import split as make_split

    split = make_split(args.limit)
    print(split.sizes(), flush=True)
    rows = run(systems, split, args)
    text = notes(split, args, args.minutes)
    if args.no_record:
        print(results_table(rows, "memory", RATIO_KEYS) + "\n\n" + text)
        return
    record_results(TITLE, rows, notes=text, baseline="memory", ratio_keys=RATIO_KEYS)


if __name__ == "__main__":
    main()
