"""MiniLM fine-tuning step: kformer's training path vs a plain Keras fit of the same model, one run.

    flock /tmp/kformer-bench.lock python -m bench.minilm_step [--texts 1280] [--epochs 3] [--rounds 2]

Both systems fine-tune the same network (all-MiniLM-L6-v2, mean pooling, dropout + dense softmax
head over BANKING77's 77 intents, the token table frozen as in the ``banking77-minilm`` recipe) on
the same first ``--texts`` training texts, in the same length-bucketed batches of 32 (each cut to
its longest text), with AdamW at 1e-4 (weight decay 0.01), label smoothing 0.1, and the same 320
validation texts each epoch:

* plain Keras: ``model.compile(AdamW, CategoricalCrossentropy, ["accuracy"])`` with Keras' own
  defaults and ``model.fit(train, validation_data=valid, epochs=E)``, nothing else;
* kformer: ``kformer.tasks.classify.train`` with the ``banking77-minilm`` recipe's settings (no
  wide part, ``epochs=E``): its compile, batches, schedule, callbacks, checkpoints and progress.

An epoch's seconds run from one epoch's end to the next (validation included); the first epoch
(tracing and compiling) is left out, and the step time is the mean of the later epochs' seconds
divided by their steps. Rounds alternate plain, kformer, plain, kformer... Target (issue 26):
kformer <= 1.1x the plain step time.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.baselines import load
from bench.harness import record_results, require_shared_data, results_table
from bench.headlines import Headline

# This benchmark's rows in BENCHMARKS.md's summary (bench/headlines.py says how they are read)
HEADLINES = (
    Headline("speed, serving and memory", "MiniLM fine-tuning step", "step_s", kformer={"system": "^kformer$"},
             baseline={"system": "^plain Keras$"}, target="<= 1.1x baseline"),
)

BATCH, RATE, DECAY, SMOOTHING, MAX_LENGTH, VALID_TEXTS = 32, 1e-4, 0.01, 0.1, 64, 320


def _epoch_seconds(ends: list[float]) -> list[float]:
    return [b - a for a, b in zip(ends, ends[1:], strict=False)]


def plain(texts, labels, valid_texts, valid_labels, classes: list[str], epochs: int) -> list[float]:
    """Epoch end times of a plain ``model.compile`` + ``model.fit`` of the MiniLM classifier."""
    import keras

    from kformer.data.batching import BucketedBatches
    from kformer.models.pretrained import bert_inputs, build_bert_classifier

    model = build_bert_classifier("minilm", len(classes), MAX_LENGTH, dropout=0.1, pooling="mean",
                                  freeze_token_embedding=True)
    ids, valid_ids = _ids(model, texts), _ids(model, valid_texts)
    model.preprocessor = None  # the batches are token ids already
    index = {c: i for i, c in enumerate(classes)}
    y = keras.utils.to_categorical([index[lb] for lb in labels], len(classes))
    valid_y = keras.utils.to_categorical([index[lb] for lb in valid_labels], len(classes))
    train = BucketedBatches(ids, y, BATCH, shuffle=True).dataset().map(bert_inputs)
    valid = BucketedBatches(valid_ids, valid_y, 64, shuffle=False).dataset().map(bert_inputs)
    model.compile(optimizer=keras.optimizers.AdamW(RATE, weight_decay=DECAY),
                  loss=keras.losses.CategoricalCrossentropy(label_smoothing=SMOOTHING), metrics=["accuracy"])
    ends = [time.perf_counter()]

    class EpochEnds(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            ends.append(time.perf_counter())

    model.fit(train, validation_data=valid, epochs=epochs, callbacks=[EpochEnds()], verbose=0)
    return ends


def _ids(model, texts) -> np.ndarray:
    from kformer.models.pretrained import bert_token_ids

    return bert_token_ids(model, texts)


def kformer(train_csv: Path, valid_csv: Path, epochs: int) -> list[float]:
    """Epoch end times of ``classify.train`` with the recipe's settings (no wide part)."""
    from kformer.config import make_config
    from kformer.tasks import classify

    config = make_config(classify.ClassifyConfig, "classify", "banking77-minilm",
                         {"epochs": epochs, "patience": epochs, "wide": False, "max_minutes": 60.0})
    ends = [time.perf_counter()]

    def progress(event):
        if event.stage == "epoch":
            ends.append(time.perf_counter())

    classify.train(config, train_csv, Path(tempfile.mkdtemp(prefix="kformer-step-")) / "model", valid=valid_csv,
                   progress=progress)
    return ends


def main() -> None:
    from bench.minilm import _write_csv

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--texts", type=int, default=1280, help="training texts (default 1280: 40 steps of 32)")
    parser.add_argument("--epochs", type=int, default=3, help="epochs per system and round; the first is not timed")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds (plain, kformer) (default 2)")
    parser.add_argument("--no-record", action="store_true", help="print the table; do not append to BENCHMARKS.md")
    args = parser.parse_args()
    folder = require_shared_data("banking77")
    texts, labels = load(folder / "train.csv")
    order = np.random.default_rng(0).permutation(len(texts))
    rows = [(texts[i], labels[i]) for i in order]
    train = rows[VALID_TEXTS:VALID_TEXTS + args.texts]
    classes = sorted({label for _, label in train})
    valid = [row for row in rows[:VALID_TEXTS] if row[1] in set(classes)]  # labels the training texts have
    scratch = Path(tempfile.mkdtemp(prefix="kformer-step-data-"))
    train_csv, valid_csv = _write_csv(scratch / "train.csv", train), _write_csv(scratch / "valid.csv", valid)
    steps = -(-len(train) // BATCH)
    seconds: dict[str, list[float]] = {"plain Keras": [], "kformer": []}
    first: dict[str, list[float]] = {"plain Keras": [], "kformer": []}
    for _ in range(args.rounds):
        for name in seconds:
            if name == "plain Keras":
                ends = plain([t for t, _ in train], [lb for _, lb in train], [t for t, _ in valid],
                             [lb for _, lb in valid], classes, args.epochs)
            else:
                ends = kformer(train_csv, valid_csv, args.epochs)
            epochs = _epoch_seconds(ends)
            first[name].append(epochs[0])
            seconds[name] += epochs[1:]
            print(name, [round(s, 1) for s in epochs], flush=True)
    plain_step = float(np.mean(seconds["plain Keras"])) / steps
    result = []
    for name, values in seconds.items():
        step = float(np.mean(values)) / steps
        result.append({"system": name, "step_s": step, "step_ratio": step / plain_step,
                       "epoch_s_mean": float(np.mean(values)), "epoch_s_sd": float(np.std(values)),
                       "first_epoch_s": float(np.mean(first[name])), "steps_per_epoch": steps,
                       "timed_epochs": len(values)})
    notes = (f"Same network (all-MiniLM-L6-v2, mean pooling, token table frozen), {len(train)} BANKING77 training "
             f"texts in length-bucketed batches of {BATCH}, AdamW {RATE:g} (weight decay {DECAY:g}), label smoothing "
             f"{SMOOTHING:g}, {VALID_TEXTS} validation texts each epoch. step_s: mean seconds of the epochs after the "
             "first (validation included) / steps; first_epoch_s: the first epoch (tracing, compiling). Rounds "
             "alternate the systems. Target: kformer <= 1.1x plain.")
    if args.no_record:
        print(results_table(result) + "\n\n" + notes)
    else:
        record_results("MiniLM fine-tuning step: kformer vs plain Keras (issue 26)", result, notes=notes)


if __name__ == "__main__":
    main()
