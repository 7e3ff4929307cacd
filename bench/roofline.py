"""How close a training step comes to the machine: float32 matmul peak, FLOPs per step, share of peak.

    flock /tmp/kformer-bench.lock python -m bench.roofline [--batches 24] [--passes 3] [--profile-steps 8]

1. **Peak.** The best of several large float32 matmuls (n = 2048 and 4096): ``keras.ops.matmul``
   (the backend's kernel, the model's matmuls) and NumPy's ``@`` (its BLAS) for comparison. The
   peak the steps are set against is the larger of the two.
2. **Steps.** Three of kformer's training steps, each built, compiled and batched by its task's own
   code with its recipe's settings: the ``en-es`` translator (the Anki pairs' first ``--pairs``
   training pairs, the recipe's token-packed batches), the ``tickets`` classifier (IT tickets,
   batches of 64 texts in width buckets) and the default ``arithmetic`` model (fresh problems).
   ``--batches`` real batches are taken from each and stepped through with ``train_on_batch``:
   one pass to trace and compile every batch shape (its seconds are the ``first_pass_s``), then
   ``--passes`` timed passes; ``step_ms`` is the median pass over its batches.
3. **FLOPs** of a step are counted from the shapes: the training step (forward, loss, gradients)
   is traced as a TensorFlow graph for each batch shape, and every matrix product in it
   (``MatMul``, ``BatchMatMul``, ``Einsum``) counts ``2 x`` the product of its dimensions. Element-
   wise work (softmax, norms, dropout, the optimizer) is not counted: it is what keeps a step
   below peak. ``share_of_peak`` = FLOPs / step time / peak.
4. **Profile.** ``--profile-steps`` steps of each model's plain TensorFlow graph (no XLA: its ops
   keep their layers' names) under TensorFlow's profiler; each op's time is put in one group by
   its name (attention, feed-forward, layer norm, dropout, output projection, softmax + loss +
   metric, embeddings, optimizer, other). The profiler slows small ops, so the groups are shares, not seconds. The input
   pipeline runs beside the step (prefetched); its row is the milliseconds per batch of
   producing the same batches alone.
5. **Before/after** (en-es, the largest): the step as it was (plain graph, the loss as
   log-softmax + a gather of the true token: :class:`GatherLoss`) against today's (the fused
   softmax cross-entropy of :class:`kformer.metrics.MaskedSparseCategoricalCrossentropy`, and
   XLA, which the translate task's ``jit_compile`` rule turns on for runs long enough to repay
   the compiles), alternating, on the same batches; tokens/s = non-padding target tokens per
   second. ``matmuls_alone_share``: the step's own matrix products, each run alone at its
   shapes (:func:`matmul_only_seconds`, 4 batches): the most the step could reach if nothing
   else took time.

Target (issue 36): the en-es step reaches >= 40 % of the measured peak, or the profile says why not.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import importlib
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bench.harness import record_or_print, require_shared_data
from bench.headlines import Headline

# This benchmark's rows in BENCHMARKS.md's summary (bench/headlines.py says how they are read)
HEADLINES = (
    Headline("speed, serving and memory", "Roofline", "share_of_peak", name="en-es training step, share of matmul peak",
             kformer={"system": "^en-es translator, optimised"}, baseline={"system": "^en-es translator, before"},
             target=">= 0.4", percent=True),
)

# Op-name groups of the profile, first match wins (names are the layers' scopes in the TF graph)
GROUPS = (
    ("optimizer", r"(^|/)(adam|adam_w)(_\d+)?/|clip_by|global_norm"),
    ("attention", r"attention"),
    ("feed-forward", r"ff_hidden|ff_output"),
    ("layer norm", r"norm"),
    ("dropout", r"dropout"),
    ("output projection", r"Tensordot|output_projection|/classes(_\d+)?/|/add/Sum"),  # /add/Sum: the tied output's bias
    ("softmax + loss + metric", r"compile_loss|loss|ArgMax|accuracy|f1_score"),
    ("embeddings", r"embedding"),
    ("other", r""),
)


@dataclass
class Workload:
    """One model's training step: how to build it compiled, and the batches it trains on."""

    name: str
    build: object  # (variant: str) -> compiled keras model
    batches: list  # [(x, y), ...] NumPy
    tokens: int  # non-padding target tokens (seq2seq) or input tokens (classifier) over the batches
    pipeline_ms: float  # producing one batch through the task's own input pipeline, alone


# --- 1. peak -------------------------------------------------------------------------------------

def matmul_peak(sizes=(2048, 4096), repeats: int = 5) -> dict:
    """Best GFLOP/s of an ``n x n`` float32 matmul: keras.ops (the backend's kernel) and NumPy."""
    import keras

    best = {"keras.ops.matmul": 0.0, "numpy": 0.0}
    for n in sizes:
        a = np.random.default_rng(0).standard_normal((n, n)).astype("float32")
        ka = keras.ops.convert_to_tensor(a)
        runs = {"keras.ops.matmul": lambda ka=ka: keras.ops.convert_to_numpy(keras.ops.matmul(ka, ka)),
                "numpy": lambda a=a: a @ a}
        for name, run in runs.items():
            run()
            for _ in range(repeats):
                start = time.perf_counter()
                run()
                best[name] = max(best[name], 2 * n**3 / (time.perf_counter() - start) / 1e9)
    return best


# --- 3. FLOPs from the shapes --------------------------------------------------------------------

def step_flops(model, x, y) -> int:
    """Matmul FLOPs of one training step (forward, loss, backward) on a batch of these shapes."""
    return sum(_op_flops(op) for op in step_graph(model, x, y).get_operations())


def step_graph(model, x, y):
    """The TensorFlow graph of one training step (forward, loss, gradients) at these shapes."""
    import tensorflow as tf

    def spec(value):
        return tf.TensorSpec(value.shape, tf.as_dtype(value.dtype))

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = model.compute_loss(x=x, y=y, y_pred=model(x, training=True), training=True)
        return tape.gradient(loss, model.trainable_variables)

    return step.get_concrete_function(tf.nest.map_structure(spec, x), spec(y)).graph


def matmul_only_seconds(graph, repeats: int = 5) -> tuple[int, float]:
    """``(FLOPs, seconds)`` of the step's matrix products alone: every MatMul/BatchMatMul/Einsum of
    ``graph`` run by itself at its shapes, 21 and 1 times in a loop inside one graph call (the
    difference over 20 is one product's time without the call's overhead; best of ``repeats``).
    Their FLOPs over these seconds is the most the step could reach with nothing else in it."""
    import tensorflow as tf

    counts = collections.Counter()
    for op in graph.get_operations():
        if _op_flops(op):
            attrs = tuple(sorted(_options(op).items()))
            counts[(op.type, attrs, tuple(tuple(t.shape) for t in op.inputs[:2]))] += 1
    flops = seconds = 0.0
    for (kind, attrs, shapes), count in counts.items():
        options = dict(attrs)
        a, b = (tf.random.normal(shape) for shape in shapes)
        step_once = _product(kind, options)
        one, many = _loop_seconds(step_once, a, b, 1, repeats), _loop_seconds(step_once, a, b, 21, repeats)
        best = max(many - one, 0.0) / 20
        flops += count * _flops_of(kind, options, shapes, tuple(step_once(a, b).shape))
        seconds += count * best
    return int(flops), seconds


def _product(kind: str, options: dict):
    """``(a, b) -> a @ b`` as the graph's op of ``kind`` with these transposes or equation computed it."""
    import tensorflow as tf

    if kind == "Einsum":
        return lambda a, b: tf.einsum(options["equation"], a, b)
    transpose_a = options.get("transpose_a", options.get("adj_x")) == "True"
    transpose_b = options.get("transpose_b", options.get("adj_y")) == "True"
    return lambda a, b: tf.linalg.matmul(a, b, transpose_a=transpose_a, transpose_b=transpose_b)


def _loop_seconds(product, a, b, times: int, repeats: int) -> float:
    """Best seconds of one graph call running ``product(a, b)`` ``times`` times in a loop (each
    result read, so no run is pruned or merged): the loop of 21 minus the loop of 1, over 20, is one
    product's time without the call's own overhead."""
    import tensorflow as tf

    @tf.function
    def loop(a, b):
        total = tf.constant(0.0)
        for _ in tf.range(times):
            total += tf.reshape(product(a, b), [-1])[0]
        return total

    loop(a, b)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        loop(a, b).numpy()
        best = min(best, time.perf_counter() - start)
    return best


def _op_flops(op) -> int:
    """2 x the product of a matrix product's dimensions (0 for any other op)."""
    if op.type not in ("MatMul", "Einsum") and not op.type.startswith("BatchMatMul"):
        return 0
    return _flops_of(op.type, _options(op), [tuple(t.shape) for t in op.inputs[:2]], tuple(op.outputs[0].shape))


def _options(op) -> dict[str, str]:
    """A matrix product op's transposes and einsum equation, as text."""
    names = ("transpose_a", "transpose_b", "adj_x", "adj_y", "equation")
    values = {k: op.get_attr(k) for k in names if k in op.node_def.attr}
    return {k: v.decode() if isinstance(v, bytes) else str(v) for k, v in values.items()}


def _flops_of(kind: str, options: dict, shapes, output) -> int:
    """2 x the product of the dimensions of a ``kind`` product of operands ``shapes``."""
    if kind == "MatMul" or kind.startswith("BatchMatMul"):
        transposed = options.get("transpose_a", options.get("adj_x")) == "True"
        k = shapes[0][-2] if transposed else shapes[0][-1]
        return 2 * int(np.prod(output)) * int(k)
    if kind == "Einsum":
        equation = options["equation"]
        sizes = {}
        for letters, shape in zip(equation.split("->")[0].split(","), shapes, strict=True):
            if "..." in letters:
                head, tail = letters.split("...")
                letters = head + "".join(chr(0x100 + i) for i in range(len(shape) - len(head) - len(tail))) + tail
            sizes.update(zip(letters, shape, strict=True))
        return 2 * int(np.prod(list(sizes.values())))
    return 0


# --- 4. profile ----------------------------------------------------------------------------------

def profile_groups(model, batches, steps: int) -> dict[str, float]:
    """Share of op time per :data:`GROUPS` over ``steps`` steps under TensorFlow's profiler."""
    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    logdir = tempfile.mkdtemp(prefix="kformer-roofline-")
    tf.profiler.experimental.start(logdir)
    for i in range(steps):
        model.train_on_batch(*batches[i % len(batches)])
    tf.profiler.experimental.stop()
    space = xplane_pb2.XSpace()
    space.ParseFromString(next(Path(logdir).rglob("*.xplane.pb")).read_bytes())
    seconds: collections.Counter = collections.Counter()
    others: collections.Counter = collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):  # the executor's op events
                continue
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                if ":" in name and not name.startswith("Executor"):  # "scope/op:Type", not the executor's own
                    group = next(g for g, pattern in GROUPS if re.search(pattern, name))
                    seconds[group] += event.duration_ps / 1e12
                    if group == "other":
                        others[name] += event.duration_ps / 1e12
    print("  largest ops in 'other':", [f"{name} {s:.3f}s" for name, s in others.most_common(6)], flush=True)
    total = sum(seconds.values()) or 1.0
    return {group: seconds[group] / total for group, _ in GROUPS}


# --- 2. the steps --------------------------------------------------------------------------------

class GatherLoss:
    """The masked, label-smoothed sequence loss as kformer computed it before the fused one:
    log-softmax, then the true token's log probability gathered (``take_along_axis``), whose
    gradient is a scatter over the ``(batch * T, vocab)`` logits. The "before" row's loss."""

    @staticmethod
    def patch(loss):
        from keras import ops

        def call(y_true, y_pred):
            y_true, y_pred = ops.cast(y_true, "int32"), ops.cast(y_pred, "float32")
            log_probs = ops.log_softmax(y_pred, axis=-1)
            losses = -ops.take_along_axis(log_probs, ops.expand_dims(y_true, -1), axis=-1)[..., 0]
            eps = loss.label_smoothing
            losses = (1.0 - eps) * losses - eps * ops.mean(log_probs, axis=-1)
            return losses * ops.cast(ops.not_equal(y_true, loss.pad_id), losses.dtype)

        loss.call = call
        return loss


def _timed_batches(dataset, count: int) -> tuple[list, float]:
    """The first ``count`` batches of a tf.data pipeline as NumPy, and ms per batch to make them."""
    start = time.perf_counter()
    batches = [(_numpy(x), np.asarray(y)) for x, y in dataset.take(count)]
    return batches, (time.perf_counter() - start) * 1000 / len(batches)


def tf_shapes(x):
    """The shapes of a batch's inputs (a dict of arrays or one array)."""
    return {k: v.shape for k, v in x.items()} if isinstance(x, dict) else x.shape


def _numpy(x):
    return {k: np.asarray(v) for k, v in x.items()} if isinstance(x, dict) else np.asarray(x)


def en_es(pairs: int, count: int) -> Workload:
    """The ``en-es`` recipe's translator on the first ``pairs`` Anki training pairs."""
    from kformer.config import make_config
    from kformer.data.pair_batches import pair_lengths
    from kformer.data.pairs import Pair
    from kformer.models.seq2seq import compile_seq2seq
    from kformer.tasks.translate import settings
    from kformer.tasks.translate.batches import batch_plan, dataset

    translate = importlib.import_module("kformer.tasks.translate.train")  # the package exports train()
    path = require_shared_data("en-es-anki", "spa.txt.gz")
    rows = [line.split("\t")[:2] for line in gzip.open(path, "rt", encoding="utf-8").read().splitlines() if "\t" in line]
    chosen = np.random.default_rng(0).permutation(len(rows))[:pairs or len(rows)]
    config = make_config(settings.TranslateConfig, "translate", "en-es", {"holdout": 200, "valid_size": 200})
    prepared = translate.prepare(config, [Pair(*rows[i]) for i in chosen], None, None, None)
    config = prepared.config
    plan = batch_plan(config, pair_lengths(*prepared.train), shuffle=True)
    batches, pipeline_ms = _timed_batches(dataset(prepared.train, plan, limits=(config.max_length, config.max_length + 1)),
                                          count)

    def build(variant: str):
        from kformer.training import set_seed

        set_seed(0)
        model = translate.build_model(config, prepared.source_vocab, prepared.target_vocab)
        compile_seq2seq(model, config.learning_rate, 0, None, label_smoothing=config.label_smoothing,
                        weight_decay=config.weight_decay, jit_compile=variant == "optimised")
        if variant == "before":
            GatherLoss.patch(model.loss)
        return model

    tokens = int(sum((y != 0).sum() for _, y in batches))
    return Workload("en-es translator", build, batches, tokens, pipeline_ms)


def tickets(count: int) -> Workload:
    """The ``tickets`` recipe's scratch encoder (no wide part) on IT tickets' training texts."""
    from bench.baselines import load
    from kformer.config import make_config
    from kformer.tasks.classify import network
    from kformer.tasks.classify.settings import ClassifyConfig
    from kformer.text.vocabulary import encode, make_tokenizer

    texts, labels = load(require_shared_data("it-service-tickets", "train.csv.gz"))
    config = make_config(ClassifyConfig, "classify", "tickets", {"wide": False, "max_minutes": None})
    classify_train = importlib.import_module("kformer.tasks.classify.train")
    vocabulary = classify_train.learned_vocabulary(config, texts, Path(tempfile.mkdtemp(prefix="kformer-roof-")), False)
    ids = encode(make_tokenizer(vocabulary, config.max_length, config.tokenizer, config.truncation), texts)
    classes = sorted(set(labels))
    y = np.eye(len(classes), dtype="float32")[[classes.index(label) for label in labels]]
    batches, pipeline_ms = _timed_batches(network.batches("encoder", ids, y, config.batch_size, True), count)

    def build(variant: str):
        from kformer.training import set_seed

        set_seed(0)
        model, kind = network.build_network(config, len(classes), vocabulary)
        network.compile_network(model, config, len(ids) // config.batch_size, kind, xla=variant == "optimised")
        return model

    tokens = int(sum((x != 0).sum() for x, _ in batches))
    return Workload("tickets classifier", build, batches, tokens, pipeline_ms)


def arithmetic(count: int) -> Workload:
    """The default ``arithmetic`` model (the demo's) on fresh problems."""
    from kformer.config import make_config
    from kformer.models.seq2seq import compile_seq2seq
    from kformer.tasks.arithmetic import settings
    from kformer.tasks.arithmetic.train import build_model, problem_batches

    config = make_config(settings.ArithmeticConfig, "arithmetic", None, {})
    source = problem_batches(config.answer_format(), config.batch_size, count, seed=2)
    start = time.perf_counter()
    batches = [(_numpy(x), np.asarray(y)) for x, y in (source[i] for i in range(count))]
    pipeline_ms = (time.perf_counter() - start) * 1000 / count

    def build(variant: str):
        from kformer.training import set_seed

        set_seed(0)
        model = build_model(config)
        compile_seq2seq(model, config.learning_rate, 0, None, label_smoothing=config.label_smoothing,
                        weight_decay=config.weight_decay, jit_compile=variant != "graph" and config.jit_compile)
        return model

    tokens = int(sum((y != 0).sum() for _, y in batches))
    return Workload("arithmetic model", build, batches, tokens, pipeline_ms)


def one_pass(model, batches) -> float:
    """Seconds of ``train_on_batch`` over ``batches``."""
    start = time.perf_counter()
    for x, y in batches:
        model.train_on_batch(x, y)
    return time.perf_counter() - start


def time_passes(model, batches, passes: int) -> tuple[float, list[float]]:
    """``(first pass seconds, [seconds of each later pass])`` of ``train_on_batch`` over ``batches``."""
    return one_pass(model, batches), [one_pass(model, batches) for _ in range(passes)]


def measure(work: Workload, variant: str, passes: int, peak: float, flops: int) -> dict:
    """One row: the step's time, FLOPs and share of peak for ``work`` built as ``variant``."""
    model = work.build(variant)
    first, later = time_passes(model, work.batches, passes)
    step = float(np.median(later)) / len(work.batches)
    return {"system": f"{work.name}, {variant}", "batches": len(work.batches),
            "step_ms": step * 1000, "gflop_per_step": flops / len(work.batches) / 1e9,
            "gflop_s": flops / len(work.batches) / step / 1e9, "share_of_peak": flops / len(work.batches) / step / peak / 1e9,
            "tokens_per_s": work.tokens / (step * len(work.batches)), "first_pass_s": first,
            "pipeline_ms_per_batch": work.pipeline_ms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=0, help="en-es training pairs (default 0: all, as the recipe)")
    parser.add_argument("--batches", type=int, default=24, help="batches per model (default 24)")
    parser.add_argument("--passes", type=int, default=3, help="timed passes over them (default 3)")
    parser.add_argument("--profile-steps", type=int, default=8, help="steps under the profiler (default 8)")
    parser.add_argument("--no-record", action="store_true", help="print the table; do not append to BENCHMARKS.md")
    args = parser.parse_args()

    peaks = matmul_peak()
    peak = max(peaks.values())
    print("peak GFLOP/s", {k: round(v, 1) for k, v in peaks.items()}, flush=True)
    rows = [{"system": f"matmul peak, {name}", "gflop_s": value, "share_of_peak": value / peak}
            for name, value in peaks.items()]
    profiles = {}
    workloads = [en_es(args.pairs, args.batches), tickets(args.batches), arithmetic(args.batches)]
    for work in workloads:
        graph_model = work.build("graph")
        flops_of_shape: dict = {}
        for x, y in work.batches:
            shape = str(tf_shapes(x)) + str(y.shape)
            if shape not in flops_of_shape:
                flops_of_shape[shape] = step_flops(graph_model, x, y)
        flops = sum(flops_of_shape[str(tf_shapes(x)) + str(y.shape)] for x, y in work.batches)
        ceiling = [matmul_only_seconds(step_graph(graph_model, x, y)) for x, y in work.batches[:4]]
        ceiling_share = sum(f for f, _ in ceiling) / sum(t for _, t in ceiling) / peak / 1e9
        print(work.name, "matmuls alone reach", round(ceiling_share, 3), "of peak", flush=True)
        variants = ("before", "optimised", "before", "optimised") if work.name.startswith("en-es") else ("today",)
        measured = [measure(work, variant, args.passes, peak, flops) for variant in variants]
        for variant in dict.fromkeys(variants):
            same = [row for row in measured if row["system"].endswith(variant)]
            row = dict(same[-1], matmuls_alone_share=ceiling_share)
            for key in ("step_ms", "gflop_s", "share_of_peak", "tokens_per_s"):
                row[key] = float(np.mean([r[key] for r in same]))
            rows.append(row)
            print(row, flush=True)
        for variant in ("before", "graph") if work.name.startswith("en-es") else ("graph",):
            label = work.name + (", before" if variant == "before" else "")
            profiles[label] = profile_groups(work.build(variant), work.batches, args.profile_steps)
            print(label, {k: round(v, 3) for k, v in profiles[label].items()}, flush=True)
    for name, shares in profiles.items():
        rows.append({"system": f"profile: {name} (plain graph)", **{f"{g} %": 100 * s for g, s in shares.items()}})
    notes = (f"Peak: the best float32 n x n matmul (n = 2048, 4096) of keras.ops.matmul and of NumPy; steps are set "
             f"against the larger ({peak:.0f} GFLOP/s). FLOPs per step: every MatMul/BatchMatMul/Einsum of the traced "
             "training step (forward, loss, gradients), 2 x the product of its dimensions; elementwise work is not "
             f"counted. {args.batches} real batches per model, one untimed pass (trace and compile: first_pass_s), "
             f"then {args.passes} timed passes (step_ms: the median pass / batches). en-es: the recipe's settings on "
             f"{args.pairs or 'all the'} Anki training pairs, 'before' = plain graph and the gather loss, 'optimised' = fused softmax "
             "cross-entropy + XLA, alternated twice (means). tickets: the recipe's encoder without its wide part, "
             "Keras' jit_compile auto (no XLA on CPU TensorFlow). arithmetic: the defaults (XLA). tokens_per_s: "
             "non-padding target tokens (classifier: input tokens). Profiles: share of op time by group over "
             f"{args.profile_steps} steps of the plain TensorFlow graph (the profiler slows small ops); "
             "pipeline_ms_per_batch: the task's input pipeline alone (it runs beside the step, prefetched).")
    record_or_print("Roofline: training steps against the machine's matmul peak (issue 36)", rows, notes,
                    record=not args.no_record)


if __name__ == "__main__":
    main()
