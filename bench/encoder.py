"""Training throughput of kformer's EncoderBlock vs the reference lesson's encoder written plainly.

Both models are the lesson's IMDB classifier (10k-word vocabulary, 200 tokens, dim 32, 2 heads,
feed-forward 64, one block, average pooling, small dense head), trained with Adam at batch 64 on
the same token ids (IMDB-like: 100–200 real tokens, then padding). kformer's model carries a
padding mask through the block into pooling; the lesson's plain block ignores padding. Each
model trains for ``--steps`` batches per repeat after one warm-up epoch (compilation), repeats
alternate between the two, and tokens/s is the median over repeats.

    python -m bench.encoder [--steps 60] [--repeats 3]
"""

from __future__ import annotations

import argparse

import keras
import numpy as np
from keras import layers

from bench.harness import Timer, interleaved_medians, record_results
from bench.headlines import Headline
from kformer.layers import EncoderBlock, MaskedGlobalAveragePooling, TokenAndPositionEmbedding

# This benchmark's rows in BENCHMARKS.md's summary (bench/headlines.py says how they are read)
HEADLINES = (
    Headline("speed, serving and memory", "Encoder training throughput", "tokens/s (median)", kformer={"system": "^kformer"},
             baseline={"system": "^lesson"}, target=">= baseline"),
)

VOCAB, LENGTH, DIM, HEADS, FF, BATCH = 10_000, 200, 32, 2, 64, 64


class LessonTokenAndPositionEmbedding(layers.Layer):
    """The lesson's embedding, as written there (no mask)."""

    def __init__(self, maxlen, vocab_size, embed_dim):
        super().__init__()
        self.token_emb = layers.Embedding(input_dim=vocab_size, output_dim=embed_dim)
        self.pos_emb = layers.Embedding(input_dim=maxlen, output_dim=embed_dim)

    def call(self, x):
        positions = keras.ops.arange(0, keras.ops.shape(x)[-1])
        return self.token_emb(x) + self.pos_emb(positions)


class LessonTransformerBlock(layers.Layer):
    """The lesson's encoder block, as written there (post-norm, no mask)."""

    def __init__(self, embed_dim, num_heads, ff_dim, rate=0.1):
        super().__init__()
        self.att = layers.MultiHeadAttention(num_heads=num_heads, key_dim=embed_dim // num_heads)
        self.ffn = keras.Sequential([layers.Dense(ff_dim, activation="relu"), layers.Dense(embed_dim)])
        self.layernorm1 = layers.LayerNormalization(epsilon=1e-6)
        self.layernorm2 = layers.LayerNormalization(epsilon=1e-6)
        self.dropout1 = layers.Dropout(rate)
        self.dropout2 = layers.Dropout(rate)

    def call(self, inputs, training=None):
        attn_output = self.dropout1(self.att(inputs, inputs), training=training)
        out1 = self.layernorm1(inputs + attn_output)
        ffn_output = self.dropout2(self.ffn(out1), training=training)
        return self.layernorm2(out1 + ffn_output)


def classifier(embedding, block, pooling) -> keras.Model:
    ids = keras.Input(shape=(LENGTH,), dtype="int32")
    x = pooling(block(embedding(ids)))
    x = layers.Dropout(0.1)(x)
    x = layers.Dense(20, activation="relu")(x)
    x = layers.Dropout(0.1)(x)
    model = keras.Model(ids, layers.Dense(2, activation="softmax")(x))
    model.compile(optimizer="adam", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def lesson_model() -> keras.Model:
    return classifier(
        LessonTokenAndPositionEmbedding(LENGTH, VOCAB, DIM),
        LessonTransformerBlock(DIM, HEADS, FF),
        layers.GlobalAveragePooling1D(),
    )


def kformer_model() -> keras.Model:
    return classifier(
        TokenAndPositionEmbedding(VOCAB, LENGTH, DIM),
        EncoderBlock(DIM, HEADS, FF),
        MaskedGlobalAveragePooling(),
    )


def synthetic_ids(count: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, VOCAB, size=(count, LENGTH), dtype="int32")
    lengths = rng.integers(100, LENGTH + 1, size=count)
    ids[np.arange(LENGTH)[None, :] >= lengths[:, None]] = 0
    return ids, rng.integers(0, 2, size=count).astype("int32")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=60, help="training batches timed per repeat")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats per model (alternating)")
    args = parser.parse_args()

    ids, labels = synthetic_ids(args.steps * BATCH)
    keras.utils.set_random_seed(0)
    models = {"lesson encoder (plain Keras)": lesson_model(), "kformer EncoderBlock": kformer_model()}
    for model in models.values():  # compile and warm up outside the timing
        model.fit(ids[: 4 * BATCH], labels[: 4 * BATCH], batch_size=BATCH, epochs=1, verbose=0)

    def measure(model):
        def tokens_per_second() -> float:
            with Timer() as timer:
                model.fit(ids, labels, batch_size=BATCH, epochs=1, verbose=0)
            return args.steps * BATCH * LENGTH / timer.seconds

        return tokens_per_second

    values = interleaved_medians({name: measure(model) for name, model in models.items()}, args.repeats)
    rows = [
        {
            "system": name,
            "parameters": models[name].count_params(),
            "tokens/s (median)": float(np.median(runs)),
            "runs": ", ".join(f"{v:,.0f}" for v in runs),
        }
        for name, runs in values.items()
    ]
    record_results(
        "Encoder training throughput (issue 2)",
        rows,
        baseline="lesson encoder (plain Keras)",
        ratio_keys=["tokens/s (median)"],
        notes=f"1 block, dim {DIM}, {HEADS} heads, ff {FF}, sequence {LENGTH}, batch {BATCH}, "
        f"{args.steps} batches per repeat, {args.repeats} alternating repeats. Target: kformer ≥ 1.00× the lesson's.",
    )


if __name__ == "__main__":
    main()
