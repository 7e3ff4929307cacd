"""The settings of an arithmetic run: one frozen dataclass (recipe sections ``[data]``,
``[model]``, ``[training]``); every field is also a ``kformer train arithmetic`` flag."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from kformer.config import TaskSettings, setting
from kformer.errors import BadInput

TASK = "arithmetic"


@dataclass(frozen=True)
class ArithmeticConfig(TaskSettings):
    """Settings of an arithmetic run (recipe sections ``[data]``, ``[model]``, ``[training]``).

    The defaults are what ``kformer train arithmetic`` and ``kformer demo`` train: operands of up to
    4 digits, each problem written at its own width as columns holding both digits and the
    operator, ones first, the answer ones first; a decoder with no encoder blocks reads the
    columns, and abacus positions with local attention (2 columns and 2 digits either way) make
    what it learns the same at every place, so it is right on operands of up to 8 digits too.
    Every batch is fresh problems, so there is no dropout."""

    task: ClassVar[str] = TASK

    digits: int = setting(8, "data", "most digits per operand the model accepts (up to 100)")
    ops: str = setting("+-", "data", "operators, from '+-*' (a product's answer has up to twice `digits` digits)",
                       metavar="OPS")
    pad_operands: bool = setting(True, "data", "zero-pad operands to `digits` (0012+0345)")
    reverse_answer: bool = setting(True, "data", "write the answer ones-digit first, sign last")
    source_style: Literal["chars", "interleaved", "columns", "op_columns", "long_multiplication"] = setting(
        "op_columns", "data", "how the problem is read: a character at a time, the operands' digits interleaved, "
        "one token per column after the operator, or one token per column holding the operator too, then an end "
        "mark; long_multiplication (products only): a's digits paired with each digit of b, and the model writes "
        "the rows of long multiplication before the product")
    held_out_size: int = setting(10000, "data", "held-out problems (operands up to `train_digits`) scored after "
                                 "training: the headline exact match")
    held_out_per_length: int = setting(1000, "data", "held-out problems scored for each operand length from 1 to "
                                       "`digits` (metrics.json `by_length`, lengths.png; 0 = none)")
    train_digits: int = setting(4, "data", "training operands have at most this many digits (0 = `digits`); the "
                                "model accepts up to `digits`: measures length generalisation (at most `digits`: "
                                "a smaller --digits narrows it unless it is given too)")
    mixed_lengths: bool = setting(True, "data", "write each problem at its own width and train on every operand "
                                  "length 1..`train_digits` in each batch (columns style, reversed answers)")
    dim: int = setting(64, "model", "model width")
    heads: int = setting(4, "model", "attention heads")
    ff_dim: int = setting(256, "model", "feed-forward width")
    encoder_layers: int = setting(0, "model", "encoder blocks (0: the decoder reads the embedded problem)")
    decoder_layers: int = setting(2, "model", "decoder blocks")
    dropout: float = setting(0.0, "model", "dropout rate")
    positions: Literal["learned", "sinusoidal", "abacus", "randomized"] = setting(
        "abacus", "model", "position embeddings: learned or sinusoidal (absolute), or abacus / randomized (learned "
        "tables with random offsets / random sorted ids while training, so longer problems meet trained rows)")
    attention_window: int = setting(2, "model", "local attention: each position sees only positions at most this "
                                    "far from its own (cross-attention: around the same column); 0 = everywhere")
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
        for name in ("attention_window", "held_out_per_length", "encoder_layers"):
            if getattr(self, name) < 0:
                raise BadInput(f"{{field}} must be 0 or more, not {getattr(self, name)}", field=name)
        for name in ("batch_size", "steps_per_epoch", "epochs", "held_out_size", "dim", "heads", "ff_dim",
                     "decoder_layers"):
            if getattr(self, name) < 1:
                raise BadInput(f"{{field}} must be at least 1, not {getattr(self, name)}", field=name)
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise BadInput(f"{{field}} must be positive, not {self.max_minutes}", field="max_minutes")
        if self.dim % self.heads:
            raise BadInput(f"dim {self.dim} must be a multiple of {{field}} ({self.heads})", field="heads")
        from kformer.data.arithmetic import OPERATORS

        if not self.ops or set(self.ops) - set(OPERATORS) or len(set(self.ops)) != len(self.ops):
            raise BadInput(f"{{field}} must be distinct operators from '{OPERATORS}', not {self.ops!r}", field="ops")
        if not 0 <= self.train_digits <= self.digits:
            raise BadInput(f"{{field}} must be between 0 (= digits) and digits ({self.digits}), not "
                           f"{self.train_digits}", field="train_digits")
        self.answer_format()  # digits, source_style: checked by the format itself

    @staticmethod
    def narrow(values: dict[str, Any]) -> dict[str, tuple[Any, str]]:
        """What one setting rules out in another (:func:`kformer.config.build_config` applies it
        when the one was given after the other): ``train_digits`` at most ``digits``;
        ``mixed_lengths`` only with a column source style and reversed answers."""
        from kformer.data.arithmetic import COLUMN_STYLES

        narrowed: dict[str, tuple[Any, str]] = {}
        if values["train_digits"] > values["digits"]:
            narrowed["train_digits"] = (values["digits"], "digits")
        if values["mixed_lengths"] and values["source_style"] not in COLUMN_STYLES:
            narrowed["mixed_lengths"] = (False, "source_style")
        elif values["mixed_lengths"] and not values["reverse_answer"]:
            narrowed["mixed_lengths"] = (False, "reverse_answer")
        return narrowed

    def answer_format(self):
        """The :class:`~kformer.data.arithmetic.ArithmeticFormat` these settings describe."""
        from kformer.data.arithmetic import ArithmeticFormat

        return ArithmeticFormat(digits=self.digits, ops=self.ops, pad_operands=self.pad_operands,
                                reverse_answer=self.reverse_answer, source_style=self.source_style,
                                train_digits=self.train_digits, mixed_lengths=self.mixed_lengths)
