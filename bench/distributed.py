"""Data-parallel training throughput: 1 vs 2 processes on this machine, and a model for N hosts.

    flock /tmp/kformer-bench.lock python -m bench.distributed            # tickets recipe, 30 steps
    python -m bench.distributed --rows 512 --steps 3 --no-record         # smoke run (seconds)

Each run is the real path of `kformer train classify --distribute` (kformer.parallel: Keras'
DataParallel on JAX, gloo on CPU, global length-bucketed batches of the `tickets` recipe, each
process keeping its rows). Before anything is timed, every batch shape (width bucket) of the
``--steps`` batches is compiled: one untimed step per shape, then one untimed epoch of all of them.
The timed part is the next epoch of the same ``--steps`` batches: training steps only (input from a
cache, forward, backward, the gradient all-reduce and the update), each step waited for; no
compilation, validation, checkpoint or start-up. Then an all-reduce of one gradient's size (all
trainable weights, float32) across the processes is timed alone. From those: per-step compute and
communication, and what N hosts would give.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time

from bench.headlines import Headline

# This benchmark's rows in BENCHMARKS.md's summary (bench/headlines.py says how they are read)
HEADLINES = (
    Headline("speed, serving and memory", "Data-parallel training", "examples/s", name="Data-parallel training, 2 processes vs 1",
             kformer={"run": "^2 process"}, baseline={"run": "^1 process"},
             why="both processes share this machine's 2 cores: the run measures the all-reduce's cost, not a speed-up"),
)

RESULT = "RESULT "


def _worker(args: argparse.Namespace) -> None:
    """One process of a run: prints ``RESULT {json}``."""
    os.environ["KERAS_BACKEND"] = "jax"
    import numpy as np

    from kformer.parallel import DistributeConfig, start

    job = DistributeConfig(args.coordinator, args.processes, args.process_id) if args.processes > 1 else None
    cluster = start(job or DistributeConfig())
    from bench.baselines import load
    from bench.harness import require_shared_data
    from kformer.config import make_config
    from kformer.models.classifier import build_encoder_classifier
    from kformer.tasks.classify import ClassifyConfig
    from kformer.tasks.classify.data import one_hot
    from kformer.tasks.classify.network import compile_network
    from kformer.text.vocabulary import encode as encode_texts
    from kformer.text.vocabulary import learn_vocabulary, make_tokenizer
    from kformer.training import set_seed

    config = make_config(ClassifyConfig, "classify", "tickets", {})
    texts, labels = load(require_shared_data("it-service-tickets", "train.csv.gz"))
    texts, labels = texts[: args.rows], labels[: args.rows]
    names = sorted(set(labels))
    vocabulary = learn_vocabulary(texts, config.vocab_size, config.tokenizer)
    ids = encode_texts(make_tokenizer(vocabulary, config.max_length, config.tokenizer, config.truncation), texts)
    y = one_hot(labels, {name: i for i, name in enumerate(names)})
    set_seed(0)
    with cluster.scope():
        model = build_encoder_classifier(len(vocabulary), len(names), config.max_length, dim=config.dim,
                                         heads=config.heads, ff_dim=config.ff_dim, blocks=config.blocks,
                                         dropout=config.dropout)
        compile_network(model, config, args.steps)
        batches = cluster.batches(ids, y, config.batch_size, shuffle=False)
        steps = min(args.steps, len(batches))
        data = batches.dataset().take(steps).cache()
        model.fit(_one_per_shape(batches, steps), epochs=1, verbose=0)  # compiles every width bucket: untimed
        timer = StepTimes()
        model.fit(data, epochs=2, verbose=0, callbacks=[timer])  # epoch 1 untimed (fills the cache), epoch 2 timed
    seconds = timer.epochs[-1]
    examples = cluster.num_processes * sum(len(batches[i][1]) for i in range(steps))  # global rows trained
    floats = sum(int(np.prod(w.shape)) for w in model.trainable_weights)
    result = {"processes": cluster.num_processes, "devices": cluster.devices, "steps": steps,
              "shapes": len({batches[i][0].shape for i in range(steps)}),
              "examples_per_s": examples / seconds, "step_ms": 1000 * seconds / steps,
              "median_step_ms": 1000 * float(np.median(timer.steps)), "max_step_ms": 1000 * max(timer.steps),
              "allreduce_ms": _allreduce_ms(floats, cluster), "weights": floats, "batch": config.batch_size}
    print(RESULT + json.dumps(result), flush=True)


def _one_per_shape(batches, steps: int):
    """A ``tf.data.Dataset`` of the first batch of each distinct shape among ``batches[:steps]``."""
    import tensorflow as tf

    first = {}
    for index in range(steps):
        first.setdefault(batches[index][0].shape, index)
    spec = batches.dataset().element_spec
    data = tf.data.Dataset.from_generator(lambda: (batches[i] for i in first.values()), output_signature=spec)
    return data.apply(tf.data.experimental.assert_cardinality(len(first)))


class StepTimes:
    """A Keras callback: ``epochs``, each epoch's wall seconds, and ``steps``, the seconds of each
    step of the last epoch, each waited for (its loss read). Made a subclass lazily: Keras loads late."""

    def __new__(cls):
        import keras
        import numpy as np

        class Timer(keras.callbacks.Callback):
            def on_train_begin(self, logs=None):
                self.epochs, self.steps = [], []

            def on_epoch_begin(self, epoch, logs=None):
                self.begin = self.last = time.perf_counter()
                self.steps = []

            def on_train_batch_end(self, batch, logs=None):
                np.asarray((logs or {}).get("loss", 0.0))  # JAX dispatches asynchronously: wait for the step
                now = time.perf_counter()
                self.steps.append(now - self.last)
                self.last = now

            def on_epoch_end(self, epoch, logs=None):
                self.epochs.append(time.perf_counter() - self.begin)

        return Timer()


def _allreduce_ms(floats: int, cluster) -> float:
    """Median milliseconds of summing a ``(floats,)`` float32 vector across all devices."""
    if cluster.devices == 1:
        return 0.0
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(jax.devices()), ("batch",))
    local = np.ones((jax.local_device_count(), floats), dtype="float32")
    array = jax.make_array_from_process_local_data(NamedSharding(mesh, PartitionSpec("batch")), local)
    reduce = jax.jit(lambda x: x.sum(0), out_shardings=NamedSharding(mesh, PartitionSpec()))
    reduce(array).block_until_ready()
    times = []
    for _ in range(11):
        begin = time.perf_counter()
        reduce(array).block_until_ready()
        times.append(time.perf_counter() - begin)
    return 1000 * float(np.median(times))


def _run(processes: int, args: argparse.Namespace) -> dict:
    """Launch ``processes`` workers on 127.0.0.1; process 0's result."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "KERAS_BACKEND": "jax"}
    command = [sys.executable, "-m", "bench.distributed", "--worker", "--rows", str(args.rows), "--steps",
               str(args.steps), "--processes", str(processes), "--coordinator", f"127.0.0.1:{port}"]
    procs = [subprocess.Popen([*command, "--process-id", str(i)], env=env, stdout=subprocess.PIPE, text=True)
             for i in range(processes)]
    try:
        outputs = [proc.communicate(timeout=args.timeout)[0] for proc in procs]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    lines = [line for line in outputs[0].splitlines() if line.startswith(RESULT)]
    if not lines or any(proc.returncode for proc in procs):
        sys.exit(f"a {processes}-process run failed (exit {[p.returncode for p in procs]})")
    return json.loads(lines[-1][len(RESULT):])


def _model(one: dict, two: dict) -> str:
    """The written model: per-step time = compute / N + all-reduce(N)."""
    compute = one["step_ms"]
    ring = two["allreduce_ms"]  # measured for 2; a ring all-reduce sends 2 (N-1)/N of the gradient
    lines = [
        f"Model: a step of the global batch ({one['batch']}) costs compute_1 / N + allreduce(N); measured "
        f"compute_1 = {compute:.1f} ms (1 process), allreduce(2) = {ring:.2f} ms for {one['weights']:,} float32 "
        f"weights (loopback, gloo). A ring all-reduce moves 2 (N-1)/N of the gradient, so allreduce(N) ~ "
        f"allreduce(2) x 2 (N-1)/N on the same network (between hosts: gradient bytes x 2 (N-1)/N / bandwidth + "
        f"latency x 2 (N-1)).",
        "",
        "| hosts N | step ms (model) | examples/s (model) |",
        "|---|---|---|",
    ]
    for n in (1, 2, 4, 8):
        step = compute / n + (0.0 if n == 1 else ring * (n - 1) / n * 2)
        lines.append(f"| {n} | {step:.1f} | {one['batch'] / step * 1000:.0f} |")
    lines += ["", "On this 2-core machine both processes share the same cores, so the measured 2-process row is "
              "not a speed-up; the model assumes one such machine per host. Small global batches stop scaling "
              "once compute_1 / N is near the all-reduce time."]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=4096, help="tickets used (the first N of the train split)")
    parser.add_argument("--steps", type=int, default=30, help="timed training steps per run")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per run before its processes are killed")
    parser.add_argument("--no-record", action="store_true", help="print only; do not append to BENCHMARKS.md")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--processes", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--process-id", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--coordinator", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args)
        return
    from bench.harness import record_or_print

    one, two = _run(1, args), _run(2, args)
    rows = [{"run": f"{r['processes']} process(es), {r['devices']} device(s)", "examples/s": round(r["examples_per_s"], 1),
             "step ms": round(r["step_ms"], 1), "median step ms": round(r["median_step_ms"], 1),
             "max step ms": round(r["max_step_ms"], 1), "all-reduce ms": round(r["allreduce_ms"], 2)}
            for r in (one, two)]
    notes = (f"`tickets` recipe, first {args.rows} training tickets, {one['steps']} steps of global batch {one['batch']} "
             f"({one['shapes']} batch shapes), 127.0.0.1. Untimed first: one step per batch shape (every width bucket "
             "compiles), then one epoch of all the steps. Timed: the next epoch, training steps only (input from a cache, "
             "forward, backward, all-reduce, update; each step waited for); step ms = that epoch's wall time / steps, "
             "median and max over its steps (a max far above the median would be a compile or a stall). No compilation, "
             "validation, checkpoint or start-up is in it.\n\n" + _model(one, two))
    record_or_print("Data-parallel training (kformer train --distribute)", rows, notes, record=not args.no_record)


if __name__ == "__main__":
    main()
