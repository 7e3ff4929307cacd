"""The arithmetic lesson's model, rebuilt in plain Keras as a baseline (../shared/reference/003_*).

What the lesson describes, and what this follows:

- problems ``a+b`` / ``a-b`` with 4-digit operands, the whole expression zero-padded on the left
  to ``2 * digits + 1`` characters (``3144+259`` -> ``03144+259``); the answer is ``=`` and then
  ``digits + 1`` characters, zero-padded, a negative one as ``-`` and ``digits`` digits
  (``=03403``, ``=-0318``): fixed width in, fixed width out;
- each character one-hot over 13 symbols (``0-9 + - =``) -> Dense to the model width, plus a
  learned position embedding;
- 4 Transformer blocks, 8-head self-attention (query/key/value width = width // heads), two
  LayerNormalizations with residual connections, an MLP of two Dense layers with GELU between
  them and dropout;
- flatten -> one Dense predicting every answer character at once (softmax per character);
- fresh problems for every batch (never one seen twice), batches of 256, epochs of 100 batches, early stopping when the
  validation loss has not improved for 20 epochs (at most 300 epochs).

What it does not say, and is assumed here (:data:`ASSUMED`): the width (64) and MLP width (128),
the dropout rate (0.1), pre-norm blocks (as the Keras ViT example the block follows), Adam at
1e-3, the validation set (2,560 fixed problems). It compiles as the lesson's code would, with
Keras' default ``jit_compile="auto"``, which Keras resolves to XLA where a GPU is present and to
no XLA on a CPU-only TensorFlow machine (``model.jit_compile`` says which).

    model = build_model(LessonSettings())
    x, y = encode_problems(a, ops, b, digits=4)     # (n, 9, 13), (n, 6, 13) one-hot
    answers = decode_answers(model.predict(x))      # ints, None where unreadable
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SYMBOLS = "0123456789+-="  # the lesson's 13 one-hot positions, in its order

# Settings the lesson does not state; the benchmark table marks them "assumed".
ASSUMED = ("dim", "ff_dim", "dropout", "learning_rate", "validation_size")  # and: pre-norm


@dataclass(frozen=True)
class LessonSettings:
    digits: int = 4
    dim: int = 64  # assumed
    ff_dim: int = 128  # assumed
    heads: int = 8
    blocks: int = 4
    dropout: float = 0.1  # assumed
    batch_size: int = 256
    steps_per_epoch: int = 100
    max_epochs: int = 300
    patience: int = 20
    learning_rate: float = 1e-3  # assumed
    validation_size: int = 2560  # assumed

    @property
    def source_length(self) -> int:
        return 2 * self.digits + 1

    @property
    def answer_length(self) -> int:
        return self.digits + 2  # "=" and digits + 1 characters


def problem_text(a: int, op: str, b: int, digits: int) -> str:
    """``3144, "+", 259`` -> ``"03144+259"`` (left-padded to ``2 * digits + 1``)."""
    return f"{a}{op}{b}".rjust(2 * digits + 1, "0")


def answer_text(value: int, digits: int) -> str:
    """``3403`` -> ``"=03403"``, ``-318`` -> ``"=-0318"`` (``digits + 2`` characters)."""
    body = "-" + str(-value).zfill(digits) if value < 0 else str(value).zfill(digits + 1)
    return "=" + body


def one_hot(texts: list[str]) -> np.ndarray:
    """``(len(texts), length, 13)`` float32 one-hot rows of equal-length ``texts``."""
    index = {c: i for i, c in enumerate(SYMBOLS)}
    ids = np.array([[index[c] for c in text] for text in texts], dtype=np.int64)
    return np.eye(len(SYMBOLS), dtype="float32")[ids]


def encode_problems(a, ops, b, digits: int) -> tuple[np.ndarray, np.ndarray]:
    """One-hot inputs ``(n, 2d+1, 13)`` and answers ``(n, d+2, 13)`` of problems ``(a, ops, b)``."""
    sources = [problem_text(int(x), str(o), int(y), digits) for x, o, y in zip(a, ops, b, strict=True)]
    answers = [answer_text(int(x) + int(y) if o == "+" else int(x) - int(y), digits)
               for x, o, y in zip(a, ops, b, strict=True)]
    return one_hot(sources), one_hot(answers)


def decode_answers(probabilities: np.ndarray) -> list[int | None]:
    """The answer each ``(length, 13)`` row of ``probabilities`` spells, None if it is not a number."""
    answers = []
    for row in np.argmax(probabilities, axis=-1):
        text = "".join(SYMBOLS[i] for i in row)
        body = text[1:] if text.startswith("=") else ""
        digits = body[1:] if body.startswith("-") else body
        answers.append(int(body) if digits.isdigit() else None)
    return answers


def build_model(settings: LessonSettings):
    """One-hot ``(batch, 2d+1, 13)`` -> per-character probabilities ``(batch, d+2, 13)``."""
    import keras
    import keras_hub
    from keras import layers

    inputs = keras.Input((settings.source_length, len(SYMBOLS)))
    x = layers.Dense(settings.dim)(inputs)
    # a layer, not Embedding called on a constant: that would be computed once at build time and
    # leave the positions a frozen random constant outside the model's weights
    x = x + keras_hub.layers.PositionEmbedding(settings.source_length)(x)
    for _ in range(settings.blocks):
        normed = layers.LayerNormalization(epsilon=1e-6)(x)
        attended = layers.MultiHeadAttention(settings.heads, settings.dim // settings.heads)(normed, normed)
        x = x + attended
        normed = layers.LayerNormalization(epsilon=1e-6)(x)
        hidden = layers.Dropout(settings.dropout)(layers.Dense(settings.ff_dim, activation="gelu")(normed))
        x = x + layers.Dropout(settings.dropout)(layers.Dense(settings.dim)(hidden))
    x = layers.Flatten()(x)
    logits = layers.Dense(settings.answer_length * len(SYMBOLS))(x)
    outputs = layers.Softmax()(layers.Reshape((settings.answer_length, len(SYMBOLS)))(logits))
    return keras.Model(inputs, outputs, name="lesson_arithmetic")


def train(settings: LessonSettings, fmt, max_minutes: float, seed: int = 0):
    """Train on fresh problems (outside ``fmt``'s held-out slice) for at most ``max_minutes``,
    counted from the first ``model.fit``'s start (graph tracing and per-epoch validation included).

    Every epoch draws its own 100 x 256 new problems, so no problem is seen twice, as the
    lesson's ``Sequence`` does; they are drawn as arrays at the epoch's start, one ``fit`` call
    per epoch, because Keras 3's ``PyDataset`` costs about half a step more per step on this CPU
    (drawing an epoch's problems takes ~0.1 s, inside the budget). Early stopping as the lesson:
    after ``patience`` epochs without a lower validation loss.
    Returns ``(model, {"train_seconds", "steps", "epochs"})``."""
    import time

    import keras

    from kformer.training import TimeBudget

    keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed + 2)
    validation = encode_problems(*fmt.sample_training(np.random.default_rng(seed + 3), settings.validation_size),
                                 settings.digits)
    model = build_model(settings)
    model.compile(optimizer=keras.optimizers.Adam(settings.learning_rate), loss="categorical_crossentropy",
                  metrics=["categorical_accuracy"])  # Keras' default jit_compile, as the lesson
    budget = TimeBudget(max_minutes)
    best, since_best, epochs = float("inf"), 0, 0
    started = time.monotonic()
    while epochs < settings.max_epochs and since_best < settings.patience and not budget.fired:
        x, y = encode_problems(*fmt.sample_training(rng, settings.steps_per_epoch * settings.batch_size),
                               settings.digits)
        budget.spent_seconds = time.monotonic() - started
        history = model.fit(x, y, batch_size=settings.batch_size, validation_data=validation, shuffle=False,
                            callbacks=[budget], verbose=0)
        epochs += 1
        loss = history.history["val_loss"][-1]
        best, since_best = (loss, 0) if loss < best else (best, since_best + 1)
    seconds = time.monotonic() - started
    steps = int(model.optimizer.iterations.numpy())
    return model, {"train_seconds": round(seconds, 2), "steps": steps, "epochs": epochs}


def evaluate(model, problems: list[tuple[int, str, int]], digits: int) -> dict:
    """Exact match and per-character accuracy (kformer's definition, answers as people write
    them) and the lesson's own per-character accuracy over its fixed-width output."""
    from kformer.data.arithmetic import score_answers, solve

    a, ops, b = (list(column) for column in zip(*problems, strict=True))
    x, y = encode_problems(a, ops, b, digits)
    probabilities = model.predict(x, batch_size=1024, verbose=0)
    scores = score_answers(decode_answers(probabilities), [solve(*p) for p in problems])
    scores["fixed_width_char_accuracy"] = float(np.mean(np.argmax(probabilities, -1) == np.argmax(y, -1)))
    return scores
