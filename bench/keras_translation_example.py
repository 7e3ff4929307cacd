"""The Keras "English-to-Spanish translation with KerasHub" example's recipe, as a baseline.

Rebuilt from its description (keras.io/examples/nlp/neural_machine_translation_with_keras_hub):
both sides lowercased; one WordPiece vocabulary per language of 15,000 tokens
(``keras_hub.tokenizers.compute_word_piece_vocabulary``, reserved ``[PAD] [UNK] [START] [END]``);
sources packed to 40 tokens, targets to 41 with ``[START]``/``[END]``;
``TokenAndPositionEmbedding`` (dim 256) -> one ``TransformerEncoder`` (feed-forward 2048, 8
heads); ``TokenAndPositionEmbedding`` -> one ``TransformerDecoder`` (2048, 8) -> dropout 0.5 ->
softmax Dense; RMSprop, sparse cross-entropy over every position (padding included, as the
example does), batch 64; greedy decoding up to 40 tokens. The example trains a fixed number of
epochs; here it trains for a time budget (:class:`kformer.training.TimeBudget`, counted from the
start of ``model.fit``: tracing and the per-epoch validation included), then decodes greedily in
batches (the example decodes one sentence at a time; the tokens chosen are the same).

    run = train(train_pairs, valid_pairs, minutes=15)
    hypotheses = translate(run, [p.source for p in test_pairs])
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class ExampleSettings:
    batch_size: int = 64
    max_length: int = 40
    source_vocab_size: int = 15_000
    target_vocab_size: int = 15_000
    dim: int = 256
    ff_dim: int = 2048
    heads: int = 8
    decoder_dropout: float = 0.5


RESERVED = ["[PAD]", "[UNK]", "[START]", "[END]"]


@dataclass
class ExampleRun:
    model: Any
    source_tokenizer: Any
    target_tokenizer: Any
    settings: ExampleSettings
    train_seconds: float
    steps: int
    epochs: int
    parameters: int
    target_tokens_per_pair: float  # non-padding target tokens per training pair ([END] included)


def _tokenizer(texts: list[str], size: int):
    import keras_hub
    import tensorflow as tf

    vocabulary = keras_hub.tokenizers.compute_word_piece_vocabulary(
        tf.data.Dataset.from_tensor_slices(texts).batch(1000).prefetch(2), vocabulary_size=size,
        reserved_tokens=RESERVED)
    return keras_hub.tokenizers.WordPieceTokenizer(vocabulary=vocabulary, lowercase=False)


def _dataset(pairs, source_tokenizer, target_tokenizer, settings: ExampleSettings, shuffle: bool):
    """Batches ``({"encoder_inputs": (64, 40), "decoder_inputs": (64, 40)}, (64, 40))``."""
    import keras_hub
    import tensorflow as tf

    source_packer = keras_hub.layers.StartEndPacker(sequence_length=settings.max_length, pad_value=0)
    target_packer = keras_hub.layers.StartEndPacker(sequence_length=settings.max_length + 1, start_value=2,
                                                    end_value=3, pad_value=0)

    def preprocess(source, target):
        source = source_packer(source_tokenizer(source))
        target = target_packer(target_tokenizer(target))
        return {"encoder_inputs": source, "decoder_inputs": target[:, :-1]}, target[:, 1:]

    sources = [p.source.lower() for p in pairs]
    targets = [p.target.lower() for p in pairs]
    dataset = tf.data.Dataset.from_tensor_slices((sources, targets)).batch(settings.batch_size)
    dataset = dataset.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)
    return (dataset.shuffle(2048) if shuffle else dataset).prefetch(16).cache()


def build_model(settings: ExampleSettings):
    """``(batch, 40) source ids, (batch, 40) target ids -> (batch, 40, target vocab)`` probabilities."""
    import keras
    import keras_hub

    source = keras.Input((None,), name="encoder_inputs", dtype="int32")
    x = keras_hub.layers.TokenAndPositionEmbedding(settings.source_vocab_size, settings.max_length, settings.dim)(source)
    encoded = keras_hub.layers.TransformerEncoder(intermediate_dim=settings.ff_dim, num_heads=settings.heads)(inputs=x)
    target = keras.Input((None,), name="decoder_inputs", dtype="int32")
    y = keras_hub.layers.TokenAndPositionEmbedding(settings.target_vocab_size, settings.max_length, settings.dim)(target)
    y = keras_hub.layers.TransformerDecoder(intermediate_dim=settings.ff_dim, num_heads=settings.heads)(
        decoder_sequence=y, encoder_sequence=encoded)
    y = keras.layers.Dropout(settings.decoder_dropout)(y)
    outputs = keras.layers.Dense(settings.target_vocab_size, activation="softmax")(y)
    return keras.Model([source, target], outputs, name="keras_example_transformer")


def train(train_pairs, valid_pairs, minutes: float, settings: ExampleSettings | None = None, seed: int = 0) -> ExampleRun:
    """Learn the vocabularies (outside the budget, as kformer's are), then train for ``minutes``."""
    import keras

    from kformer.training import TimeBudget

    settings = settings or ExampleSettings()
    keras.utils.set_random_seed(seed)
    source_tokenizer = _tokenizer([p.source.lower() for p in train_pairs], settings.source_vocab_size)
    target_tokenizer = _tokenizer([p.target.lower() for p in train_pairs], settings.target_vocab_size)
    settings = ExampleSettings(**{**settings.__dict__,
                                  "source_vocab_size": int(source_tokenizer.vocabulary_size()),
                                  "target_vocab_size": int(target_tokenizer.vocabulary_size())})
    model = build_model(settings)
    model.compile("rmsprop", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    budget = TimeBudget(minutes)
    started = time.monotonic()
    history = model.fit(_dataset(train_pairs, source_tokenizer, target_tokenizer, settings, shuffle=True),
                        validation_data=_dataset(valid_pairs, source_tokenizer, target_tokenizer, settings, False),
                        epochs=10**6, callbacks=[budget], verbose=0)
    seconds = time.monotonic() - started
    # non-padding targets of a pair: its pieces, cut to 39 to leave room for [START]/[END], and [END]
    lengths = [len(ids) for ids in target_tokenizer([p.target.lower() for p in train_pairs])]
    per_pair = float(np.mean([min(n, settings.max_length - 1) + 1 for n in lengths]))
    return ExampleRun(model, source_tokenizer, target_tokenizer, settings, seconds,
                      int(model.optimizer.iterations.numpy()), len(history.history["loss"]),
                      int(model.count_params()), per_pair)


def translate(run: ExampleRun, sources: list[str], batch_size: int = 64) -> list[str]:
    """Greedy translations (lowercased input, as the example), up to 40 tokens, in batches."""
    import keras_hub

    settings = run.settings
    packer = keras_hub.layers.StartEndPacker(sequence_length=settings.max_length, pad_value=0)
    results = []
    for start in range(0, len(sources), batch_size):
        chunk = [s.lower() for s in sources[start:start + batch_size]]
        encoder_ids = np.asarray(packer(run.source_tokenizer(chunk)))
        prompt = np.zeros((len(chunk), settings.max_length), dtype="int32")
        prompt[:, 0] = 2  # [START]
        done = np.zeros(len(chunk), dtype=bool)
        for index in range(1, settings.max_length):
            probabilities = run.model.predict_on_batch([encoder_ids, prompt])
            chosen = np.argmax(np.asarray(probabilities)[:, index - 1, :], axis=-1)
            prompt[:, index] = np.where(done, 0, chosen)
            done |= chosen == 3
            if done.all():
                break
        for row in prompt[:, 1:]:
            ids = [int(i) for i in row]
            ids = ids[: ids.index(3)] if 3 in ids else ids
            ids = [i for i in ids if i > 3] or [0]
            text = run.target_tokenizer.detokenize(np.asarray([ids], dtype="int32"))[0]
            text = text.numpy() if hasattr(text, "numpy") else text
            text = text.decode("utf-8") if isinstance(text, bytes) else str(text)
            results.append(text.replace("[PAD]", "").strip())
    return results
