"""Training an arithmetic model: fresh problems every batch, the held-out ones never among them.

:class:`ArithmeticRun` fills in the task skeleton (:mod:`kformer.tasks.skeleton`); :func:`train`
is the public entry point.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kformer.errors import BadInput
from kformer.tasks import skeleton
from kformer.tasks.arithmetic.model import ArithmeticModel, read_rows, write_folder
from kformer.tasks.arithmetic.settings import TASK, ArithmeticConfig

if TYPE_CHECKING:
    from kformer.parallel import Cluster, DistributeConfig
    from kformer.training import Progress

HELD_OUT_SEED = 2026  # the held-out problems are the same for every run, so runs compare


@dataclass
class _Fitted:
    model: Any
    seconds: float
    steps: int
    stopped_by_budget: bool


@dataclass
class _Prepared(skeleton.Prepared):
    test_rows: list | None = None  # the problems to score instead of generated held-out ones


class ArithmeticRun(skeleton.TrainingRun):
    """Generated problems: no data to read but the optional ``test`` problems to score."""

    task = TASK
    config_class = ArithmeticConfig

    def read(self, config, data, valid, test):
        if data is not None or valid is not None:
            raise BadInput("arithmetic trains on problems it generates; pass data=None (and test= to score your own)",
                           field="data")
        return None if test is None else read_rows(test)

    def prepare(self, config, data, saved):
        return _Prepared(config, test_rows=data)

    def fit(self, prepared, state_dir: Path, resume: bool, progress, cluster):
        return _fit(prepared.config, state_dir, resume, progress, cluster)

    def evaluate(self, prepared, fitted: _Fitted) -> dict[str, Any]:
        config = prepared.config
        rows = prepared.test_rows
        if rows is None:
            problems = config.answer_format().held_out_problems(config.held_out_size, seed=HELD_OUT_SEED)
            rows = [(p, _solve(*p)) for p in problems]
        model = ArithmeticModel(fitted.model, config.answer_format(), Path("."), {})
        scores = model.score(rows)
        by_length = {}
        if config.held_out_per_length:
            by_length = model.score_lengths(range(1, config.digits + 1), config.held_out_per_length,
                                            seed=HELD_OUT_SEED)
        return {
            "exact_match": scores["exact_match"],
            "char_accuracy": scores["char_accuracy"],
            "held_out_size": scores["n"],
            "train_seconds": round(fitted.seconds, 2),
            "steps": fitted.steps,
            "examples_seen": fitted.steps * config.batch_size,
            "stopped_by_budget": fitted.stopped_by_budget,
            "parameters": int(fitted.model.count_params()),
            "by_length": by_length,
        }

    def write(self, out: Path, prepared, fitted: _Fitted, metrics: dict[str, Any]) -> None:
        write_folder(out, fitted.model, prepared.config, metrics)


def train(config: ArithmeticConfig | dict | None = None, data: None = None, out: str | os.PathLike = "runs/arithmetic",
          *, test=None, resume: bool | str = False, progress: Progress | None = None, command: Sequence[str] | None = None,
          distribute: DistributeConfig | None = None):
    """Train on generated problems, score held-out problems, write the model folder ``out``.

    Args:
        config: an :class:`ArithmeticConfig`, a dict of its settings, or None for the defaults.
        data: must be None: training problems are generated (never from the held-out set).
        out: the model folder to write.
        test: problems to score instead of ``held_out_size`` generated held-out ones (a path or
            lines such as ``"12+34=46"``; see :meth:`ArithmeticModel.evaluate`).
        resume: continue from the last checkpoint in ``out/training`` (the first run's settings;
            ``epochs`` and ``max_minutes`` may change); ``"auto"``: when there is a complete one,
            else start afresh.
        progress: called with :class:`~kformer.training.ProgressEvent` while training.
        command: recorded in ``metrics.json`` (the CLI passes its argv).
        distribute: train data-parallel as one process of that job (:mod:`kformer.parallel`; JAX
            backend). ``batch_size`` is the global batch: every process generates the same
            problems and trains on its rows of each batch. Process 0 writes ``out``; the others
            only their checkpoints beside it (their result's ``folder``).

    Returns:
        :class:`~kformer.tasks.base.TrainResult`; ``metrics`` has ``exact_match``,
        ``char_accuracy``, ``held_out_size``, ``train_seconds``, ``steps``, ``parameters`` and the
        ``recipe``.
    """
    return skeleton.train(ArithmeticRun(), config, data, out, test=test, resume=resume, progress=progress,
                          command=None if command is None else list(command), distribute=distribute)


def _solve(a: int, op: str, b: int) -> int:
    from kformer.data.arithmetic import solve

    return solve(a, op, b)


def _fit(config: ArithmeticConfig, state_dir: Path, resume: bool, progress: Progress | None,
         cluster: Cluster | None) -> _Fitted:
    """Build, compile and train the model. With a ``cluster`` (inside its scope) each process
    feeds its rows and takes process 0's time-budget decisions."""
    from kformer import parallel, training
    from kformer.models.seq2seq import compile_seq2seq

    fmt = config.answer_format()
    training.set_seed(config.seed)
    model = build_model(config)
    # constant rate in the optimizer; the callback warms up, then decays over the steps or the budget
    compile_seq2seq(model, config.learning_rate, config.warmup_steps, None, label_smoothing=config.label_smoothing,
                    weight_decay=config.weight_decay, jit_compile=config.jit_compile)
    budget = None if config.max_minutes is None else config.max_minutes * 60.0
    schedule = training.budget_schedule(config.learning_rate, config.warmup_steps,
                                        config.epochs * config.steps_per_epoch, budget, config.final_lr_ratio)
    done = training.last_checkpoint(state_dir) if resume else None
    schedule.steps = 0 if done is None else done[1] * config.steps_per_epoch
    first_step = schedule.steps
    # Every batch is fresh problems, so the training loss already measures generalisation: no
    # separate validation set (and no second compilation for it).
    batches = problem_batches(fmt, config.batch_size, config.steps_per_epoch, seed=config.seed + 2, cluster=cluster)
    plan = training.FitPlan(epochs=config.epochs, out_dir=state_dir, patience=None, max_minutes=config.max_minutes,
                            resume=resume)
    result = parallel.fit(cluster, model, batches, None, plan, shard=False, callbacks=[schedule], progress=progress)
    return _Fitted(model, result.seconds, schedule.steps - first_step, result.stopped_by_budget)


def build_model(config: ArithmeticConfig):
    """The uncompiled encoder-decoder ``config`` describes (in its ``precision``), sized for its
    answer format's vocabulary and lengths."""
    from kformer.models.seq2seq import Seq2SeqTransformer
    from kformer.precision import precision_scope

    fmt = config.answer_format()
    vocab_size = len(fmt.vocabulary)
    with precision_scope(config.precision):
        return Seq2SeqTransformer(
            vocab_size, vocab_size, fmt.source_length, fmt.target_length,
            dim=config.dim, heads=config.heads, ff_dim=config.ff_dim, encoder_layers=config.encoder_layers,
            decoder_layers=config.decoder_layers, dropout=config.dropout, positions=config.positions,
            tie_embeddings=config.tie_embeddings, norm_first=config.norm_first,
            attention_window=config.attention_window,
        )


def problem_batches(fmt, batch_size: int, steps: int, seed: int, cluster: Cluster | None = None):
    """A ``keras.utils.PyDataset`` of ``steps`` batches of fresh training problems per epoch:
    ``({"source": (batch, S), "target_in": (batch, T)}, target_out (batch, T))``. With a
    ``cluster`` every process draws the same global batch and gets its rows of it
    (:meth:`~kformer.parallel.Cluster.local`)."""
    import keras
    import numpy as np

    class ProblemBatches(keras.utils.PyDataset):
        def __init__(self):
            super().__init__()
            self.rng = np.random.default_rng(seed)

        def __len__(self):
            return steps

        def __getitem__(self, index):
            source, target_in, target_out = fmt.training_batch(self.rng, batch_size)
            batch = {"source": source, "target_in": target_in}, target_out
            return batch if cluster is None else cluster.local(batch)

    return ProblemBatches()
