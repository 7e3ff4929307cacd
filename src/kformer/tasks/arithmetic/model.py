"""A loaded arithmetic model, and the arithmetic model folder: the one place that writes and reads it.

The folder: ``kformer.json`` (task ``arithmetic``, the answer format and its vocabulary,
``max_digits``: the longest operands it accepts), ``model.keras``, ``metrics.json``,
``curves.png``, ``lengths.png`` (exact match against operand length, when measured) and
``training/`` (checkpoints and logs; ``resume`` reads them).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kformer.config import to_dict
from kformer.errors import BadInput
from kformer.folders import TRAINING_DIR, read_manifest, write_model_folder
from kformer.tasks.arithmetic.settings import TASK
from kformer.tasks.base import AttentionMaps, TaskModel, check_texts, write_curves

MANIFEST_KEYS = ("model_file", "format")
VOCAB_FILE = "vocab.txt"  # of an export: the tokens, id = line
LENGTHS_PICTURE = "lengths.png"

Problem = tuple[int, str, int]


def write_folder(out: Path, model, config, metrics: dict) -> None:
    """Write the model folder ``out`` of a trained ``model`` with the settings ``config``."""
    fmt = config.answer_format()
    manifest = {
        "vocabulary": fmt.vocabulary.to_json(),
        "format": fmt.to_json(),
        "max_digits": fmt.digits,
        "answer_order": (
            "digits least-significant first (negative answers in ten's complement), then the sign"
            if fmt.reverse_answer else "as written"
        ),
        "recipe": to_dict(config),
        "metrics": {k: metrics[k] for k in ("exact_match", "char_accuracy", "held_out_size", "train_seconds")},
    }
    def pictures(stage: Path) -> None:
        write_curves(out / TRAINING_DIR, stage)
        if metrics.get("by_length"):
            from kformer.viz import plot_accuracy_by_length

            plot_accuracy_by_length({"exact match": metrics["by_length"]}, stage / LENGTHS_PICTURE, fmt.most_trained)

    write_model_folder(out, TASK, model, manifest, metrics, pictures)


# --- using a trained model ------------------------------------------------------------------------


def read_rows(data, check=None) -> list[tuple[Problem, int]]:
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
        return {**super().metadata(), "digits": self.format.digits, "max_digits": self.format.digits,
                "train_digits": self.format.most_trained, "ops": self.format.ops}

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
                    f"{{field}}: {a}{op}{b} is outside what this model learned ({self.format.digits}-digit operands at most, "
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

    def score_lengths(self, lengths, per_length: int, *, seed: int = 2026, batch_size: int = 1000) -> dict:
        """Exact match per operand length: ``{"7": {"exact_match", "char_accuracy", "n"}, ...}``
        on up to ``per_length`` held-out problems whose operands both have exactly that many
        digits (``n`` 0 and no scores where the held-out slice has none of that length)."""
        from kformer.data.arithmetic import solve

        report = {}
        for length in lengths:
            problems = self.format.length_problems(int(length), per_length, seed=seed)
            if not problems:
                report[str(length)] = {"exact_match": None, "char_accuracy": None, "n": 0}
                continue
            scores = self.score([(p, solve(*p)) for p in problems], batch_size=batch_size)
            report[str(length)] = {key: scores[key] for key in ("exact_match", "char_accuracy", "n")}
        return report

    def evaluate(self, data=None, *, digits: int | None = None, beam: int = 1, batch_size: int = 1000,
                 limit: int | None = None, out: str | os.PathLike | None = None) -> dict:
        """Score problems with known answers: a path (lines ``12+34=46`` or ``12+34<TAB>46``) or a
        list of such lines or ``((a, op, b), answer)`` pairs; or, with ``digits`` instead, ``limit``
        (default 1000) generated held-out problems whose operands both have exactly that many
        digits (at most the model's ``digits``). With ``out``, also writes ``out/evaluation.json``."""
        from kformer.artifacts import write_json_atomic
        from kformer.data.arithmetic import solve

        if digits is not None:
            if data is not None:
                raise BadInput("give data or {field}, not both", field="digits")
            if not 1 <= int(digits) <= self.format.digits:
                raise BadInput(f"{{field}} must be between 1 and {self.format.digits} (the longest operands this model "
                               f"accepts), not {digits}", field="digits")
            problems = self.format.length_problems(int(digits), max(int(limit or 1000), 1))
            if not problems:
                raise BadInput(f"no held-out problem has {digits}-digit operands (there are too few such problems); "
                               "try a longer {field}", field="digits")
            rows, source = [(p, solve(*p)) for p in problems], f"held-out problems, {digits}-digit operands"
        else:
            rows = read_rows(data, check=self._problems)
            rows = rows if limit is None else rows[: max(int(limit), 1)]
            source = str(data) if isinstance(data, str | os.PathLike) else "in memory"
        report = {**self.score(rows, beam=beam, batch_size=batch_size), "data": source}
        if out is not None:
            write_json_atomic(Path(out) / "evaluation.json", report)
        return report

    def predict(self, instances: Sequence[str], *, beam: int = 1) -> list[dict[str, Any]]:
        """``{"problem": "12+34", "answer": 46, "text": "=46"}`` per problem string (:meth:`solve`'s
        answers as dicts)."""
        self.check_values({"beam": beam})
        problems = self._problems(check_texts(instances, "instances"), "instances")
        answers = self.solve(problems, beam=beam)
        return [
            {"problem": self.format.problem_text(*p), "answer": a, "text": "?" if a is None else f"={a}"}
            for p, a in zip(problems, answers, strict=True)
        ]

    def check_values(self, parameters: dict[str, Any]) -> None:
        beam = parameters["beam"]
        if isinstance(beam, bool) or not isinstance(beam, int) or beam < 1:
            raise BadInput(f"{{field}} must be a whole number of at least 1, not {beam!r}", field="beam")

    def attention_maps(self, text: str) -> AttentionMaps:
        """Solve one problem and return encoder, decoder-self and cross attention of every layer
        and head, the problem's tokens and the answer tokens as labels."""
        import numpy as np

        from kformer.models.generation import greedy_decode
        from kformer.text.specials import END_ID, START, START_ID

        problem = self._problems([text], "text")[0]
        source_tokens = self.format.source_tokens(*problem)
        source = self.format.encode_sources([problem])[:, : len(source_tokens)]  # no padding columns to draw
        generated = greedy_decode(self.model, source, self.format.target_length)[0]
        # The decoder reads [START] + answer; an answer that never ended is cut to the positions it has.
        answer_ids = [int(t) for t in generated if t > END_ID][: self.model.max_target_length - 1]
        target_in = np.array([[START_ID, *answer_ids]], dtype="int32")
        maps = {name: stack[0] for name, stack in self.model.attention_maps(source, target_in).items()}
        target_tokens = [START] + [self.format.vocabulary.tokens[t] for t in answer_ids]
        answer = self.format.decode_answer(generated)
        return AttentionMaps(
            maps=maps,
            rows={"encoder": source_tokens, "decoder_self": target_tokens, "cross": target_tokens},
            cols={"encoder": source_tokens, "decoder_self": target_tokens, "cross": source_tokens},
            output=f"{self.format.problem_text(*problem)}={'?' if answer is None else answer}",
        )

    def export_plan(self):
        """The encoder, one cached decoder step and greedy decoding (:mod:`kformer.models.seq2seq_export`),
        the tokens as ``vocab.txt`` and the answer format in the metadata."""
        from kformer.models.export_plan import Plan
        from kformer.models.seq2seq_export import seq2seq_endpoints, seq2seq_info

        tokens = self.format.vocabulary.to_json()

        def write_files(folder: Path) -> None:
            (folder / VOCAB_FILE).write_text("\n".join(tokens) + "\n", encoding="utf-8")

        info = {"vocabulary_files": [VOCAB_FILE], **seq2seq_info(self.model), "arithmetic_format": self.format.to_json()}
        return Plan(TASK, seq2seq_endpoints(self.model), [self.model], write_files, info)

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

