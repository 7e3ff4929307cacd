"""Multi-digit addition and subtraction: train on generated problems, solve, score, explain.

The model is a :class:`~kformer.models.seq2seq.Seq2SeqTransformer` that reads a problem
(``1234+4567``, written for it as :class:`~kformer.data.arithmetic.ArithmeticFormat` says) and
writes the answer. Training draws fresh problems every batch and never one of the held-out set.

Life cycle::

    from kformer.tasks import arithmetic
    result = arithmetic.train(arithmetic.ArithmeticConfig(digits=2, epochs=2), None, "runs/arith")
    model = arithmetic.load("runs/arith")
    model.solve(["12+34", "99-5"])            # [46, 94]
    model.evaluate(["12+34=46", "9-87=-78"])  # exact match, per-character accuracy
    model.attention_maps("12+34").maps["cross"].shape   # (layers, heads, answer, source)

The folder: ``kformer.json`` (task ``arithmetic``, the answer format and its vocabulary),
``model.keras``, ``metrics.json``, and ``training/`` (checkpoints and logs; ``resume`` reads them).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from kformer.artifacts import write_json_atomic
from kformer.config import as_config, setting, to_dict
from kformer.errors import BadInput
from kformer.folders import TRAINING_DIR, read_manifest, write_model_folder
from kformer.tasks.base import (
    AttentionMaps,
    Progress,
    TaskModel,
    TrainResult,
    check_texts,
    training_folder,
    write_curves,
)

if TYPE_CHECKING:
    from kformer.parallel import Cluster, DistributeConfig

TASK = "arithmetic"
MANIFEST_KEYS = ("model_file", "format")
STATE_FILE = "state.json"

Problem = tuple[int, str, int]


@dataclass(frozen=True)
class ArithmeticConfig:
    """Settings of an arithmetic run (recipe sections ``[data]``, ``[model]``, ``[training]``)."""

    digits: int = setting(4, "data", "digits per operand")
    ops: str = setting("+-", "data", "operators, from '+-'")
    pad_operands: bool = setting(True, "data", "zero-pad operands to `digits` (0012+0345)")
    reverse_answer: bool = setting(True, "data", "write the answer ones-digit first, sign last")
    source_style: str = setting("columns", "data", "chars | interleaved | columns: how the problem is read")
    held_out_size: int = setting(10000, "data", "held-out problems scored after training")
    train_digits: int = setting(0, "data", "training operands have at most this many digits (0 = `digits`); "
                                "held-out ones use all `digits`: measures length generalisation")
    dim: int = setting(64, "model", "model width")
    heads: int = setting(4, "model", "attention heads")
    ff_dim: int = setting(256, "model", "feed-forward width")
    encoder_layers: int = setting(2, "model", "encoder blocks")
    decoder_layers: int = setting(2, "model", "decoder blocks")
    dropout: float = setting(0.0, "model", "dropout rate")
    positions: str = setting("learned", "model", "learned | sinusoidal position embeddings")
    norm_first: bool = setting(True, "model", "pre-norm blocks")
    tie_embeddings: bool = setting(False, "model", "reuse the target embedding as the output projection")
    batch_size: int = setting(128, "training", "problems per step")
    steps_per_epoch: int = setting(200, "training", "steps of fresh problems per epoch")
    epochs: int = setting(50, "training", "most epochs")
    learning_rate: float = setting(3e-3, "training", "peak learning rate")
    warmup_steps: int = setting(100, "training", "steps of linear warmup")
    final_lr_ratio: float = setting(0.02, "training", "the rate decays to learning_rate times this")
    label_smoothing: float = setting(0.0, "training", "label smoothing (0 = off)")
    weight_decay: float = setting(0.0, "training", "AdamW weight decay (0 = Adam)")
    jit_compile: bool = setting(True, "training", "XLA-compile the training step")
    max_minutes: float | None = setting(None, "training", "stop training after this many minutes")
    precision: Literal["float32", "mixed_bfloat16"] = setting(
        "float32", "training", "mixed_bfloat16: compute in bfloat16 (weights and outputs stay float32); see bench/precision.py")
    seed: int = setting(0, "training", "random seed")

    def __post_init__(self):
        for name in ("batch_size", "steps_per_epoch", "epochs", "held_out_size", "dim", "heads", "ff_dim",
                     "encoder_layers", "decoder_layers"):
            if getattr(self, name) < 1:
                raise BadInput(f"{{field}} must be at least 1, not {getattr(self, name)}", field=name)
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise BadInput(f"{{field}} must be positive, not {self.max_minutes}", field="max_minutes")
        if self.dim % self.heads:
            raise BadInput(f"dim {self.dim} must be a multiple of {{field}} ({self.heads})", field="heads")
        if not self.ops or set(self.ops) - set("+-"):
            raise BadInput(f"{{field}} must be made of '+' and '-', not {self.ops!r}", field="ops")
        self.answer_format()  # digits, source_style: checked by the format itself

    def answer_format(self):
        """The :class:`~kformer.data.arithmetic.ArithmeticFormat` these settings describe."""
        from kformer.data.arithmetic import ArithmeticFormat

        return ArithmeticFormat(digits=self.digits, ops=self.ops, pad_operands=self.pad_operands,
                                reverse_answer=self.reverse_answer, source_style=self.source_style,
                                train_digits=self.train_digits)


# --- training ----------------------------------------------------------------------------------


def train(
    config: ArithmeticConfig | dict | None = None,
    data: None = None,
    out: str | os.PathLike = "runs/arithmetic",
    *,
    test=None,
    resume: bool = False,
    progress: Progress | None = None,
    command: Sequence[str] | None = None,
    distribute: DistributeConfig | None = None,
) -> TrainResult:
    """Train on generated problems, score held-out problems, write the model folder ``out``.

    Args:
        config: an :class:`ArithmeticConfig`, a dict of its settings, or None for the defaults.
        data: must be None: training problems are generated (never from the held-out set).
        out: the model folder to write.
        test: problems to score instead of ``held_out_size`` generated held-out ones (a path or
            lines such as ``"12+34=46"``; see :meth:`ArithmeticModel.evaluate`).
        resume: continue from the last checkpoint in ``out/training``.
        progress: called with :class:`~kformer.training.ProgressEvent` while training.
        command: recorded in ``metrics.json`` (the CLI passes its argv).
        distribute: train data-parallel as one process of that job (:mod:`kformer.parallel`; JAX
            backend). ``batch_size`` is the global batch: every process generates the same
            problems and trains on its rows of each batch. Process 0 writes ``out``; the others
            only their checkpoints beside it (their result's ``folder``).

    Returns:
        :class:`TrainResult`; ``metrics`` has ``exact_match``, ``char_accuracy``,
        ``held_out_size``, ``train_seconds``, ``steps``, ``parameters`` and the ``recipe``.
    """
    if data is not None:
        raise BadInput("arithmetic trains on problems it generates; pass data=None (and test= to score your own)",
                       field="data")
    config = as_config(ArithmeticConfig, config)
    out = Path(out)
    test_rows = _read_rows(test) if test is not None else None  # bad input fails before any writing
    cluster = None
    if distribute is not None:
        from kformer.parallel import start

        cluster = start(distribute)  # waits for every process of the job
        out = cluster.folder(out)
    with training_folder(out, resume) as state_dir:  # refuses a foreign or busy folder; cleans up on failure
        if resume:
            config = _resumed_config(state_dir, config)
        if cluster is not None:
            cluster.check_batch_size(config.batch_size)
        if not resume:
            write_json_atomic(state_dir / STATE_FILE, {"settings": to_dict(config)})
        with contextlib.nullcontext() if cluster is None else cluster.scope():
            model, seconds, steps, stopped = _fit(config, state_dir, resume, progress, cluster)
        arithmetic_model = ArithmeticModel(model, config.answer_format(), out, {})
        if test_rows is None:
            problems = config.answer_format().held_out_problems(config.held_out_size, seed=2026)
            test_rows = [(p, _solve(*p)) for p in problems]
        scores = arithmetic_model.score(test_rows)
        metrics = {
            "exact_match": scores["exact_match"],
            "char_accuracy": scores["char_accuracy"],
            "held_out_size": scores["n"],
            "train_seconds": round(seconds, 2),
            "steps": steps,
            "examples_seen": steps * config.batch_size,
            "stopped_by_budget": stopped,
            "parameters": int(model.count_params()),
            "command": list(command or []),
            "recipe": to_dict(config),
        }
        if cluster is None or cluster.chief:
            _write_folder(out, model, config, metrics)
    return TrainResult(folder=out, metrics=metrics, config=config)


def _resumed_config(state_dir: Path, config: ArithmeticConfig) -> ArithmeticConfig:
    """The settings the interrupted run was started with (the model must be built the same way);
    only ``epochs`` and ``max_minutes`` may change."""
    import dataclasses

    from kformer.config import build_config

    saved = json.loads((state_dir / STATE_FILE).read_text(encoding="utf-8"))["settings"]
    return dataclasses.replace(build_config(ArithmeticConfig, saved), epochs=config.epochs,
                               max_minutes=config.max_minutes)


def _fit(config: ArithmeticConfig, state_dir: Path, resume: bool, progress: Progress | None,
         cluster: Cluster | None = None):
    """Build, compile and train the model; ``(model, seconds, steps done, stopped by budget)``. With a
    ``cluster`` (call it inside :meth:`~kformer.parallel.Cluster.scope`) each process feeds its rows
    and takes process 0's time-budget decisions."""
    from kformer import parallel, training
    from kformer.models.seq2seq import Seq2SeqTransformer, compile_seq2seq
    from kformer.precision import precision_scope

    fmt = config.answer_format()
    training.set_seed(config.seed)
    vocab_size = len(fmt.vocabulary)
    with precision_scope(config.precision):
        model = Seq2SeqTransformer(
            vocab_size, vocab_size, fmt.source_length, fmt.target_length,
            dim=config.dim, heads=config.heads, ff_dim=config.ff_dim, encoder_layers=config.encoder_layers,
            decoder_layers=config.decoder_layers, dropout=config.dropout, positions=config.positions,
            tie_embeddings=config.tie_embeddings, norm_first=config.norm_first,
        )
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
    result = parallel.fit(
        cluster, model, batches, None, shard=False, epochs=config.epochs, out_dir=state_dir, patience=None,
        max_minutes=config.max_minutes, resume=resume, callbacks=[schedule], progress=progress,
    )
    return model, result.seconds, schedule.steps - first_step, result.stopped_by_budget


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
            source, target_in, target_out = fmt.encode(*fmt.sample_training(self.rng, batch_size))
            batch = {"source": source, "target_in": target_in}, target_out
            return batch if cluster is None else cluster.local(batch)

    return ProblemBatches()


def _write_folder(out: Path, model, config: ArithmeticConfig, metrics: dict) -> None:
    fmt = config.answer_format()
    manifest = {
        "vocabulary": fmt.vocabulary.to_json(),
        "format": fmt.to_json(),
        "answer_order": (
            "digits least-significant first (negative answers in ten's complement), then the sign"
            if fmt.reverse_answer else "as written"
        ),
        "recipe": to_dict(config),
        "metrics": {k: metrics[k] for k in ("exact_match", "char_accuracy", "held_out_size", "train_seconds")},
    }
    write_model_folder(out, TASK, model, manifest, metrics, lambda stage: write_curves(out / TRAINING_DIR, stage))


# --- using a trained model ------------------------------------------------------------------------


def _solve(a: int, op: str, b: int) -> int:
    from kformer.data.arithmetic import solve

    return solve(a, op, b)


def _read_rows(data, check=None) -> list[tuple[Problem, int]]:
    """Scored problems from a path (lines ``1234+4567=5801`` or ``1234+4567<TAB>5801``) or a list
    of such lines or of ``((a, op, b), answer)`` pairs; blank lines are skipped. ``check([problem])``
    may refuse a parsed problem (a BadInput, reported with its line)."""
    from kformer.data.arithmetic import parse_problem_line
    from kformer.data.io import read_text_lines
    from kformer.errors import KformerError

    if isinstance(data, str | os.PathLike):
        lines, name = read_text_lines(data), str(data)
    else:
        lines, name = enumerate(data, 1), "data"
    rows = []
    for number, line in lines:
        if isinstance(line, tuple):
            rows.append(line)
            continue
        if not str(line).strip():
            continue
        try:
            rows.append(parse_problem_line(str(line)))
            if check is not None:
                check([rows[-1][0]])
        except KformerError as exc:
            reason = exc.message_for("").removeprefix(": ")
            raise BadInput(f"{name}, line {number}: {reason}", field="data") from None
    if not rows:
        raise BadInput(f"{name} has no problems; write lines like 1234+4567=5801", field="data")
    return rows


class ArithmeticModel(TaskModel):
    """A loaded arithmetic folder: the Keras model and the answer format it was trained with."""

    task = TASK
    parameters = {"beam": 1}

    def __init__(self, model, fmt, folder: Path, manifest: dict):
        super().__init__(folder, manifest)
        self.model, self.format = model, fmt

    def metadata(self) -> dict[str, Any]:
        return {**super().metadata(), "digits": self.format.digits, "ops": self.format.ops}

    def _problems(self, problems, name: str = "problems") -> list[Problem]:
        """``(a, op, b)`` tuples from strings (``"12+34"``) or tuples, within what the model learned."""
        from kformer.data.arithmetic import parse_problem
        from kformer.errors import KformerError

        parsed = []
        for i, problem in enumerate(problems):
            try:
                problem = parse_problem(problem) if isinstance(problem, str) else tuple(problem)
            except KformerError as exc:
                raise BadInput(f"{{field}}: {exc}", field=f"{name}[{i}]") from None
            a, op, b = problem
            if a >= 10**self.format.digits or b >= 10**self.format.digits or op not in self.format.ops:
                raise BadInput(
                    f"{{field}}: {a}{op}{b} is outside what this model learned ({self.format.digits}-digit operands, "
                    f"operators '{self.format.ops}')", field=f"{name}[{i}]",
                )
            parsed.append((a, op, b))
        return parsed

    def solve(self, problems: Sequence[str | Problem], *, beam: int = 1, batch_size: int = 1000) -> list[int | None]:
        """The model's answer to each problem (``"1234+4567"`` or ``(1234, "+", 4567)``); None
        where what it wrote is not a number."""
        from kformer.models.generation import beam_search, greedy_decode

        if isinstance(problems, str):
            problems = [problems]
        problems = self._problems(problems)
        if beam < 1:
            raise BadInput(f"{{field}} must be at least 1, not {beam}", field="beam")
        answers: list[int | None] = []
        for start in range(0, len(problems), max(int(batch_size), 1)):
            source = self.format.encode_sources(problems[start : start + batch_size])
            if beam > 1:
                generated = beam_search(self.model, source, self.format.target_length, beam_width=beam)
            else:
                generated = greedy_decode(self.model, source, self.format.target_length)
            answers.extend(self.format.decode_answer(row) for row in generated)
        return answers

    def score(self, rows: list[tuple[Problem, int]], *, beam: int = 1, batch_size: int = 1000) -> dict:
        """Exact match and per-character accuracy of the answers to ``rows`` ``((a, op, b), answer)``,
        with up to 10 wrong examples."""
        from kformer.data.arithmetic import score_answers

        problems = [problem for problem, _ in rows]
        expected = [value for _, value in rows]
        answers = self.solve(problems, beam=beam, batch_size=batch_size)
        wrong = [
            {"problem": self.format.problem_text(*p), "expected": e, "predicted": a}
            for p, e, a in zip(problems, expected, answers, strict=True) if a != e
        ]
        return {**score_answers(answers, expected), "wrong_examples": wrong[:10], "beam": beam}

    def evaluate(self, data, *, beam: int = 1, batch_size: int = 1000, limit: int | None = None,
                 out: str | os.PathLike | None = None) -> dict:
        """Score problems with known answers: a path (lines ``12+34=46`` or ``12+34<TAB>46``) or a
        list of such lines or ``((a, op, b), answer)`` pairs. With ``out``, also writes
        ``out/evaluation.json``."""
        from kformer.artifacts import write_json_atomic

        rows = _read_rows(data, check=self._problems)
        if limit is not None:
            rows = rows[: max(int(limit), 1)]
        report = {**self.score(rows, beam=beam, batch_size=batch_size), "data": str(data) if isinstance(data, str | os.PathLike) else "in memory"}
        if out is not None:
            write_json_atomic(Path(out) / "evaluation.json", report)
        return report

    def predict_instances(self, instances: list[str], parameters: dict[str, Any] | None = None) -> list[dict]:
        """``{"problem": "12+34", "answer": 46, "text": "=46"}`` per problem string."""
        parameters = self.check_parameters(parameters)
        instances = check_texts(instances, "instances")
        problems = self._problems(instances, "instances")
        answers = self.solve(problems, beam=int(parameters["beam"]))
        return [
            {"problem": self.format.problem_text(*p), "answer": a, "text": "?" if a is None else f"={a}"}
            for p, a in zip(problems, answers, strict=True)
        ]

    def attention_maps(self, text: str) -> AttentionMaps:
        """Solve one problem and return encoder, decoder-self and cross attention of every layer
        and head, the problem's tokens and the answer tokens as labels."""
        import numpy as np

        from kformer.models.generation import greedy_decode
        from kformer.text.specials import END_ID, START, START_ID

        problem = self._problems([text], "text")[0]
        source = self.format.encode_sources([problem])
        generated = greedy_decode(self.model, source, self.format.target_length)[0]
        # The decoder reads [START] + answer; an answer that never ended is cut to the positions it has.
        answer_ids = [int(t) for t in generated if t > END_ID][: self.model.max_target_length - 1]
        target_in = np.array([[START_ID, *answer_ids]], dtype="int32")
        maps = {name: stack[0] for name, stack in self.model.attention_maps(source, target_in).items()}
        source_tokens = self.format.source_tokens(*problem)
        target_tokens = [START] + [self.format.vocabulary.tokens[t] for t in answer_ids]
        answer = self.format.decode_answer(generated)
        return AttentionMaps(
            maps=maps,
            rows={"encoder": source_tokens, "decoder_self": target_tokens, "cross": target_tokens},
            cols={"encoder": source_tokens, "decoder_self": target_tokens, "cross": source_tokens},
            output=f"{self.format.problem_text(*problem)}={'?' if answer is None else answer}",
        )

    def warmup(self) -> None:
        """Decode once at every batch bucket, so no request waits for a compile."""
        from kformer.models.generation import BATCH_BUCKETS

        for batch in BATCH_BUCKETS:
            self.solve([(1, self.format.ops[0], 1)] * batch)


def load(folder: str | os.PathLike) -> ArithmeticModel:
    """Open an arithmetic model folder (safe mode; a clear error if it is not one)."""
    import kformer.models.seq2seq  # noqa: F401  registers Seq2SeqTransformer for loading
    from kformer.data.arithmetic import ArithmeticFormat
    from kformer.errors import CorruptModel, KformerError
    from kformer.folders import load_keras_model

    folder = Path(folder)
    manifest = read_manifest(folder, task=TASK, required=MANIFEST_KEYS)
    try:
        fmt = ArithmeticFormat(**manifest["format"])
    except (TypeError, KformerError):
        raise CorruptModel(f"{folder}/kformer.json has no valid 'format'; retrain the model", field="model_dir") from None
    model = load_keras_model(folder / manifest["model_file"])
    return ArithmeticModel(model, fmt, folder, manifest)


solve = ArithmeticModel.solve
evaluate = ArithmeticModel.evaluate
attention_maps = ArithmeticModel.attention_maps
