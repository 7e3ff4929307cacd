"""The en-ta recipe's training step on a frozen MiniLM encoder: plain TensorFlow graph vs XLA.

    flock /tmp/kformer-bench.lock python -m bench.pretrained_xla [--batches 40] [--passes 3] [--pairs 0]

The translate task's ``jit_compile`` rule turned XLA off for a pretrained encoder because its step
under XLA had not been measured. With a frozen encoder the step never runs the backbone: training
feeds the backbone's outputs, computed once (``encoder_states``), to kformer's bridge, encoder
layers and decoder, the same kind of step XLA speeds up for kformer's own encoder (bench.roofline).
This measures it on the recipe's own batches:

1. The seven English->Tamil training corpora of ``bench.en_ta_splits`` (no validation or test
   pair), prepared by the task's own code with the ``en-ta`` recipe's settings (auto's vocabulary,
   corpus weights, 2,048-token batches).
2. ``--batches`` batches of the first training epoch (a shuffled mix of widths, as training sees
   them) with their frozen-encoder states; each variant, built with the same seed, steps through
   them with ``train_on_batch``: one untimed pass (trace and, for XLA, compile every batch shape:
   ``first_pass_s``), then ``--passes`` timed passes, the variants alternating (``step_ms``: the
   median pass / batches, the mean over both rounds).
3. A run: every batch shape of one whole epoch counted (``epoch_shapes``). Each variant traces
   (plain graph) or compiles (XLA) each shape once, ``compile_s_per_shape`` (the first pass's time
   over a timed pass's, per shape of the sample), so ``first_epoch_s`` = the epoch's shapes x that
   + batches per epoch x ``step_ms``, a later epoch ``epoch_s`` = batches x ``step_ms``, and
   ``steps_in_1200_s`` = the updates 1,200 s of training makes (about the recipe's share of 30
   minutes), its compiles paid.
"""

from __future__ import annotations

import argparse
import importlib

import numpy as np

from bench.harness import record_or_print
from bench.headlines import Headline
from bench.roofline import one_pass

# This benchmark's rows in BENCHMARKS.md's summary (bench/headlines.py says how they are read)
HEADLINES = (
    Headline("speed, serving and memory", "English->Tamil training step", "tokens_per_s",
             name="en-ta training step (frozen MiniLM), XLA vs plain graph",
             kformer={"system": "^XLA"}, baseline={"system": "^plain graph"}, target=">= baseline"),
)


def prepared_corpora(pairs: int):
    """The en-ta recipe's prepared training data (the task's ``prepare``) on the seven corpora's
    training pairs (the first ``pairs`` of a seeded shuffle; 0: all)."""
    from bench.en_ta_splits import split
    from kformer.config import make_config
    from kformer.tasks.translate import settings

    translate = importlib.import_module("kformer.tasks.translate.train")  # the package exports train()
    parts = split()
    train = parts.train
    if pairs:
        train = [train[i] for i in sorted(np.random.default_rng(0).permutation(len(train))[:pairs])]
    config = make_config(settings.TranslateConfig, "translate", "en-ta", {"max_minutes": None})
    return translate, translate.prepare(config, train, parts.valid_pairs(), None, None)


def epoch_shapes(prepared, plan) -> list[tuple]:
    """The ``(source, target)`` padded shape of every batch of the first epoch, in order."""
    from kformer.tasks.translate.batches import dataset

    config = prepared.config
    limits = (config.max_length, config.max_length + 1)
    return [(tuple(x["source"].shape), tuple(y.shape)) for x, y in dataset(prepared.train, plan, limits=limits)
            .take(plan.steps).as_numpy_iterator()]


def sample_batches(translate, prepared, plan, count: int) -> list:
    """The first ``count`` batches of epoch 0 as NumPy, each with its frozen-encoder states."""
    from kformer.tasks.translate import pretrained
    from kformer.tasks.translate.batches import dataset

    config = prepared.config
    rows = sorted({int(i) for batch in plan.epoch(0)[:count] for i in batch})
    model = translate.build_model(config, prepared.source_vocab, prepared.target_vocab, prepared.encoder)
    computed = pretrained.cached_states(model, [prepared.train[0][i] for i in rows])
    states = [None] * len(prepared.train[0])
    for i, state in zip(rows, computed, strict=True):
        states[i] = state
    width = computed[0].shape[-1]
    states = [np.zeros((0, width), "float32") if s is None else s for s in states]
    limits = (config.max_length, config.max_length + 1)
    return [({k: np.asarray(v) for k, v in x.items()}, np.asarray(y))
            for x, y in dataset(prepared.train, plan, limits=limits, states=states).take(count).as_numpy_iterator()]


def build(translate, prepared, xla: bool):
    """The recipe's translator, compiled as training compiles it, plain graph or XLA."""
    from kformer.models.seq2seq import compile_seq2seq
    from kformer.training import set_seed

    config = prepared.config
    set_seed(0)
    model = translate.build_model(config, prepared.source_vocab, prepared.target_vocab, prepared.encoder)
    compile_seq2seq(model, config.learning_rate, 0, None, label_smoothing=config.label_smoothing,
                    weight_decay=config.weight_decay, jit_compile=xla)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=0, help="training pairs (default 0: all, as the recipe)")
    parser.add_argument("--batches", type=int, default=40, help="batches stepped through (default 40)")
    parser.add_argument("--passes", type=int, default=3, help="timed passes per variant and round (default 3)")
    parser.add_argument("--no-record", action="store_true", help="print the table; do not append to BENCHMARKS.md")
    args = parser.parse_args()

    translate, prepared = prepared_corpora(args.pairs)
    from kformer.data.pair_batches import pair_lengths
    from kformer.tasks.translate.batches import batch_plan

    config = prepared.config
    plan = batch_plan(config, pair_lengths(*prepared.train), shuffle=True, groups=prepared.groups,
                      weights=prepared.mix.weights)
    shapes = epoch_shapes(prepared, plan)
    batches = sample_batches(translate, prepared, plan, args.batches)
    sample_shapes = len({(x["source"].shape, y.shape) for x, y in batches})
    print(f"{plan.steps} batches per epoch, {len(set(shapes))} shapes; sample {len(batches)} batches, "
          f"{sample_shapes} shapes", flush=True)
    models = {"plain graph": build(translate, prepared, False), "XLA": build(translate, prepared, True)}
    first = {name: one_pass(model, batches) for name, model in models.items()}
    timed = {name: [] for name in models}
    for _ in range(2):
        for name, model in models.items():
            timed[name].append(float(np.median([one_pass(model, batches) for _ in range(args.passes)])))
    tokens = int(sum((y != 0).sum() for _, y in batches))
    rows = []
    for name in models:
        step = float(np.mean(timed[name])) / len(batches)
        compile_per_shape = max(first[name] - step * len(batches), 0.0) / sample_shapes
        compiles = len(set(shapes)) * compile_per_shape
        rows.append({"system": f"{name}{', frozen MiniLM' if prepared.encoder is not None else ''}",
                     "batches": len(batches), "step_ms": step * 1000, "tokens_per_s": tokens / (step * len(batches)),
                     "first_pass_s": first[name], "compile_s_per_shape": compile_per_shape,
                     "epoch_batches": plan.steps, "epoch_shapes": len(set(shapes)),
                     "first_epoch_s": compiles + plan.steps * step, "epoch_s": plan.steps * step,
                     "steps_in_1200_s": int(max(1200 - compiles, 0) / step)})
        print(rows[-1], flush=True)
    notes = (f"The en-ta recipe ({config.encoder} encoder, dim {config.dim}, {config.encoder_layers}+"
             f"{config.decoder_layers} layers, {config.batch_tokens}-token batches, target vocabulary "
             f"{prepared.target_vocab.vocab_size}) on {len(prepared.train[0]):,} training pairs of the seven corpora "
             f"(bench.en_ta_splits; no validation or test pair). {len(batches)} batches of the first epoch, one untimed "
             f"pass each, then 2 rounds of {args.passes} timed passes, the variants alternating (step_ms: the mean "
             "of the rounds' median pass / batches). tokens_per_s: non-padding target tokens. compile_s_per_shape: the "
             "first pass's time over a timed pass's, per batch shape of the sample (plain graph: tracing); "
             "first_epoch_s: the epoch's shapes x that + batches x step_ms; epoch_s: a later epoch; "
             "steps_in_1200_s: the updates 1,200 s of training makes, its compiles paid. Alone on the machine.")
    record_or_print("English->Tamil training step: frozen MiniLM, plain graph vs XLA", rows, notes,
                    record=not args.no_record)


if __name__ == "__main__":
    main()
