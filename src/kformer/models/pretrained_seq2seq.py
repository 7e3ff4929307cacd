"""A translator whose encoder is a pretrained BERT-family backbone (Rothe et al. 2020, "Leveraging
Pre-trained Checkpoints for Sequence Generation Tasks"): the backbone reads the WordPiece source,
a Dense ``bridge`` brings its width to the decoder's when they differ, and kformer's own decoder
cross-attends to the result.

:class:`PretrainedEncoderSeq2Seq` is a :class:`~kformer.models.seq2seq.Seq2SeqTransformer` whose
:meth:`encode` runs the backbone, so the cached greedy and beam loops
(:mod:`kformer.models.decode_loops`) decode it unchanged. A frozen backbone's outputs can be
computed once (:func:`encoder_states`) and fed instead of the source (``"encoder_states"`` in the
call's inputs), so training runs only the bridge and the decoder. :class:`ScaledRateAdam` fine-tunes
the backbone at a lower learning rate than the decoder's.
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops

from kformer.layers import padding_mask
from kformer.models.seq2seq import Seq2SeqTransformer


@keras.saving.register_keras_serializable(package="kformer")
class PretrainedEncoderSeq2Seq(Seq2SeqTransformer):
    """``Seq2SeqTransformer`` with a ``keras_hub.models.BertBackbone`` as its encoder.

    Args:
        encoder: the backbone (its weights are saved with the model; ``[PAD]`` = id 0).
        target_vocab_size, max_source_length, max_target_length, dim, heads, ff_dim,
        decoder_layers, dropout, positions, tie_embeddings, norm_first: the decoder's, as
            :class:`~kformer.models.seq2seq.Seq2SeqTransformer` (``positions``: learned or
            sinusoidal).
        freeze_encoder: keep the backbone's weights (not trainable; it runs in inference mode).

    Call:
        ``model({"source": (batch, S) int, "target_in": (batch, T) int})`` -> logits
        ``(batch, T, target_vocab_size)``; with ``"encoder_states": (batch, S, hidden) float``
        (the backbone's outputs for ``source``, :func:`encoder_states`) the backbone is skipped.
    """

    def __init__(self, encoder, target_vocab_size, max_source_length, max_target_length, dim=128, heads=4,
                 ff_dim=512, decoder_layers=2, dropout=0.1, positions="learned", tie_embeddings=False,
                 norm_first=False, freeze_encoder=True, **kwargs):
        if positions not in ("learned", "sinusoidal"):
            raise ValueError(f"a pretrained encoder's decoder takes learned or sinusoidal positions, not {positions!r}")
        for name in ("source_vocab_size", "encoder_layers", "share_embeddings", "attention_window"):
            kwargs.pop(name, None)  # fixed below
        # set before Seq2SeqTransformer.__init__, whose build() runs encode() once
        self.encoder = encoder
        self.freeze_encoder = bool(freeze_encoder)
        encoder.trainable = not self.freeze_encoder
        encoder.get_layer("pooled_dense").trainable = False  # the [CLS] pooler: unused
        self.hidden_dim = int(encoder.hidden_dim)
        self.bridge = (None if self.hidden_dim == int(dim)
                       else keras.layers.Dense(int(dim), name="bridge"))
        # the parent's source embedding is left tiny (one id, no encoder blocks): never used
        super().__init__(1, target_vocab_size, max_source_length, max_target_length, dim=dim, heads=heads,
                         ff_dim=ff_dim, encoder_layers=0, decoder_layers=decoder_layers, dropout=dropout,
                         positions=positions, tie_embeddings=tie_embeddings, norm_first=norm_first, **kwargs)
        self.source_embedding.trainable = False  # unused: no gradients to ask for

    def call(self, inputs, training=None):
        if "encoder_states" in inputs:
            source_mask = padding_mask(ops.cast(inputs["source"], "int32"))
            encoder_outputs = self.bridge_states(inputs["encoder_states"])
        else:
            encoder_outputs, source_mask = self.encode(inputs["source"], training=training)
        return self.decode(inputs["target_in"], encoder_outputs, source_mask, training=training)

    def _forward(self, source_ids, target_in, training=None):
        return self.call({"source": source_ids, "target_in": target_in}, training=training)

    def encoder_states(self, source_ids, training=None):
        """The backbone's ``sequence_output`` ``(batch, S, hidden)`` for ``(batch, S)`` WordPiece ids."""
        source_ids = ops.cast(source_ids, "int32")
        inputs = {"token_ids": source_ids, "padding_mask": padding_mask(source_ids),
                  "segment_ids": ops.zeros_like(source_ids)}
        training = bool(training) and not self.freeze_encoder
        return self.encoder(inputs, training=training)["sequence_output"]

    def bridge_states(self, states):
        """Backbone outputs ``(batch, S, hidden)`` -> the decoder's width ``(batch, S, dim)``."""
        return states if self.bridge is None else self.bridge(states)

    def encode(self, source_ids, training=None, position_ids=None):
        """``(batch, S)`` ids -> ``(encoder_outputs (batch, S, dim), source_mask (batch, S) bool)``."""
        source_ids = ops.cast(source_ids, "int32")
        return self.bridge_states(self.encoder_states(source_ids, training)), padding_mask(source_ids)

    def decoder_states(self, source_ids, target_in, encoder_states=None):
        """Teacher-forced final decoder states ``(batch, T, dim)`` float32 (the parent's); with
        ``encoder_states (batch, S, hidden)``, the backbone's outputs for ``source_ids``
        (:func:`encoder_states`), the backbone does not run."""
        if encoder_states is None:
            return super().decoder_states(source_ids, target_in)
        source_mask = padding_mask(ops.cast(source_ids, "int32"))
        return self.teacher_forced_states(target_in, self.bridge_states(encoder_states), source_mask)

    def encoder_attention(self, source_ids):
        """The backbone's self-attention too: ``(encoder_outputs, source_mask, [(batch, heads, S, S)
        per backbone layer])`` (the backbone's own forward pass, layer by layer)."""
        bert, source_mask = self.encoder, padding_mask(source_ids)
        tokens = bert.token_embedding(source_ids)
        x = bert.embeddings_add((tokens, bert.position_embedding(tokens),
                                 bert.segment_embedding(ops.zeros_like(source_ids))))
        x = bert.embeddings_layer_norm(x)
        maps = []
        for layer in bert.transformer_layers:
            x, scores = layer(x, padding_mask=source_mask, return_attention_scores=True, training=False)
            maps.append(scores)
        return self.bridge_states(x), source_mask, maps

    def get_config(self):
        config = super().get_config()
        for name in ("source_vocab_size", "encoder_layers", "share_embeddings", "attention_window"):
            config.pop(name)
        config.update(encoder=keras.saving.serialize_keras_object(self.encoder), freeze_encoder=self.freeze_encoder)
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["encoder"] = keras.saving.deserialize_keras_object(config["encoder"])
        return cls(**config)


def encoder_states(model: PretrainedEncoderSeq2Seq, sources: list[list[int]], batch_size: int = 64) -> list[np.ndarray]:
    """The backbone's outputs for each source (a list of WordPiece ids): one float32
    ``(len(source), hidden)`` array per source, computed once in length-sorted batches cut to
    their width bucket (padding changes no real position's output)."""
    from kformer.data.batching import bucket_width, length_bucketed_batches, pad_batch

    lengths = [len(s) for s in sources]
    longest = max(lengths, default=1)
    states: list[np.ndarray] = [np.zeros((0, model.hidden_dim), "float32")] * len(sources)
    run = _compiled_states(model)
    for rows in length_bucketed_batches(lengths, batch_size):
        width = bucket_width(max(lengths[i] for i in rows), longest)
        out = np.asarray(run(pad_batch([sources[i] for i in rows], limit=width)), dtype="float32")
        for k, i in enumerate(rows):
            states[i] = out[k, : lengths[i]].copy()
    return states


def _compiled_states(model):
    """``ids (batch, width)`` -> backbone outputs, as a TensorFlow graph when that is the backend."""
    def run(ids):
        return model.encoder_states(ops.convert_to_tensor(ids, "int32"), training=False)

    if keras.backend.backend() != "tensorflow":
        return run
    import tensorflow as tf

    graph = tf.function(lambda ids: model.encoder_states(ids, training=False),
                        input_signature=[tf.TensorSpec((None, None), tf.int32)])
    return lambda ids: graph(tf.convert_to_tensor(ids, tf.int32))


@keras.saving.register_keras_serializable(package="kformer")
class ScaledRateAdam(keras.optimizers.Adam):
    """Adam whose ``slow_variables`` (e.g. a pretrained encoder's) move at ``slow_scale`` times the
    learning rate (schedules included); every other variable at the rate itself. Weight decay
    applies as in Adam(W)."""

    def __init__(self, slow_scale=1.0, slow_variables=(), **kwargs):
        super().__init__(**kwargs)
        self.slow_scale = float(slow_scale)
        self._slow_ids = {id(v) for v in slow_variables}
        self._scales: list[float] = []

    def build(self, var_list):
        self._scales = [self.slow_scale if id(v) in self._slow_ids else 1.0 for v in var_list]
        super().build(var_list)

    def update_step(self, gradient, variable, learning_rate):
        scale = self._scales[self._get_variable_index(variable)] if self._scales else 1.0
        if scale != 1.0:
            learning_rate = ops.multiply(learning_rate, scale)
        return super().update_step(gradient, variable, learning_rate)

    def get_config(self):
        return {**super().get_config(), "slow_scale": self.slow_scale}
