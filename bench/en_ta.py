"""English->Tamil (TICO-19 + Tatoeba): translation memory, the Keras example's recipe and kformer's `en-ta`.

    flock /tmp/kformer-bench.lock .venv/bin/python -m bench.en_ta [--minutes 7]

Whole TICO-19 documents (by source URL in ``en-ta.meta.tsv``) are held out -- about 15% of
the pairs, seed 0 -- so no test sentence shares a document with training. Training uses the
other TICO-19 documents plus all Tatoeba pairs. The systems, their time budgets and the
throughput columns are those of ``bench/en_es.py`` (the Keras example's recipe is trained for
``--minutes`` too); ``--minutes 7`` runs about 25 minutes in all. The issue's aim: chrF >= 35.
"""

from __future__ import annotations

import argparse

from bench.baselines import parse_settings
from bench.en_es import BUDGET_NOTE, RATIO_KEYS, compare
from bench.harness import record_results, require_shared_data, results_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=7.0, help="kformer's training budget (default 7)")
    parser.add_argument("--recipe", default="en-ta", help="kformer recipe (default: en-ta)")
    parser.add_argument("--limit", type=int, default=None, help="use only N random training and N/10 test pairs (smoke runs)")
    parser.add_argument("--extra", nargs="*", default=[], metavar="NAME=VALUE", help="extra settings for kformer's run")
    parser.add_argument("--no-record", action="store_true", help="print, do not append to BENCHMARKS.md")
    args = parser.parse_args()
    from kformer.data.pairs import document_holdout, random_holdout, read_document_ids, read_pairs

    tico = require_shared_data("en-ta-tico19")
    pairs = read_pairs(tico / "en-ta.tsv")
    train, test, documents = document_holdout(pairs, read_document_ids(tico / "en-ta.meta.tsv"), fraction=0.15, seed=0)
    train += read_pairs(require_shared_data("en-ta-tatoeba", "en-ta.tsv"))
    if args.limit:
        train = random_holdout(train, min(args.limit, len(train)), seed=1)[1]
        test = random_holdout(test, min(max(args.limit // 10, 10), len(test)), seed=1)[1]
    rows = compare(train, test, args.recipe, args.minutes, parse_settings(args.extra))
    notes = (
        f"English->Tamil: {len(train):,} training pairs (TICO-19 minus {len(documents)} held-out documents, plus "
        f"Tatoeba), {len(test):,} test pairs from the held-out TICO-19 documents: "
        f"{', '.join(d.rstrip('/').rsplit('/', 1)[-1] for d in documents)}. sacrebleu corpus BLEU/chrF, one reference. "
        f"Aim in the issue: chrF >= 35. Trained at most {args.minutes:g} min each on a shared 2-core CPU. " + BUDGET_NOTE
    )
    if args.no_record:
        print(results_table(rows, rows[0]["system"], RATIO_KEYS))
        print(notes)
        return
    record_results("English->Tamil translation (TICO-19, document hold-out)", rows, notes=notes,
                   baseline=rows[0]["system"], ratio_keys=RATIO_KEYS)


if __name__ == "__main__":
    main()
