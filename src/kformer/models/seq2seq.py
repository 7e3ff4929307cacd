"""The encoder-decoder Transformer: source ids in, next-target-token logits out.

Teacher forcing: the decoder reads ``target_in = [START] + target`` and is trained to predict
``target_out = target + [END]`` (both padded with id 0, which the loss and accuracy in
``kformer.metrics`` ignore). Generation (``kformer.models.generation``) uses :meth:`encode`,
:meth:`cross_attention_caches`, :meth:`empty_self_attention_caches` and :meth:`decode_step` to
decode one token at a time with key/value caches.
"""

from __future__ import annotations

import keras
from keras import ops

from kformer.layers import (
    AbacusPositions,
    DecoderBlock,
    EncoderBlock,
    RandomizedPositions,
    TokenAndPositionEmbedding,
    padding_mask,
)
from kformer.metrics import MaskedAccuracy, MaskedSparseCategoricalCrossentropy


@keras.saving.register_keras_serializable(package="kformer")
class Seq2SeqTransformer(keras.Model):
    """Encoder-decoder Transformer (Vaswani et al. 2017) for ``(batch, S)`` -> ``(batch, T)`` ids.

    Args:
        source_vocab_size, target_vocab_size: vocabulary sizes (id 0 = padding in both).
        max_source_length: longest source the position table covers.
        max_target_length: longest ``target_in`` (``[START] + target``) and so the longest
            generated sequence.
        dim, heads, ff_dim: model width, attention heads, feed-forward width.
        encoder_layers, decoder_layers: number of blocks.
        dropout: dropout rate in every block.
        positions: ``"learned"`` or ``"sinusoidal"`` position embeddings, or learned tables
            indexed by ids that extrapolate to longer sequences (one set of ids per row for the
            source and the target alike): ``"abacus"`` (:class:`~kformer.layers.AbacusPositions`,
            random offsets while training) or ``"randomized"``
            (:class:`~kformer.layers.RandomizedPositions`, sorted random ids while training), each
            over a table of twice the longest sequence's rows, so that while training every row
            the model meets at inference also comes at every place of a short sequence.
        attention_window: when above 0, every attention is local: a position sees the positions
            at most this far from its own (the decoder: earlier ones; cross-attention: around the
            same index of the source), as for problems whose answer position ``i`` depends only
            on the source around position ``i``. 0: attention everywhere.
        tie_embeddings: reuse the target token embedding as the output projection (plus a bias).
        norm_first: pre-norm blocks (then a final layer norm closes each stack).
        share_embeddings: one token table for source and target (a shared vocabulary: the two
            sizes must be equal); with ``tie_embeddings`` also for the output -- one
            ``(vocab, dim)`` table in all.

    Call:
        ``model({"source": (batch, S) int, "target_in": (batch, T) int})`` -> logits
        ``(batch, T, target_vocab_size)``.
    """

    def __init__(self, source_vocab_size, target_vocab_size, max_source_length, max_target_length, dim=128, heads=4,
                 ff_dim=512, encoder_layers=2, decoder_layers=2, dropout=0.1, positions="learned",
                 tie_embeddings=False, norm_first=False, share_embeddings=False, attention_window=0, **kwargs):
        super().__init__(**kwargs)
        self.source_vocab_size = int(source_vocab_size)
        self.target_vocab_size = int(target_vocab_size)
        self.max_source_length = int(max_source_length)
        self.max_target_length = int(max_target_length)
        self.dim = int(dim)
        self.heads = int(heads)
        self.ff_dim = int(ff_dim)
        self.encoder_layers = int(encoder_layers)
        self.decoder_layers = int(decoder_layers)
        self.dropout = float(dropout)
        self.positions = positions
        self.tie_embeddings = bool(tie_embeddings)
        self.norm_first = bool(norm_first)
        self.share_embeddings = bool(share_embeddings)
        self.attention_window = int(attention_window)
        if self.share_embeddings and self.source_vocab_size != self.target_vocab_size:
            raise ValueError(f"share_embeddings needs one vocabulary: source size {self.source_vocab_size} != "
                             f"target size {self.target_vocab_size}")

        dtype = self.dtype_policy  # every sub-layer computes in the model's policy (e.g. mixed_bfloat16)
        block_args = dict(dim=self.dim, heads=self.heads, ff_dim=self.ff_dim, dropout=self.dropout,
                          norm_first=self.norm_first, attention_window=self.attention_window, dtype=dtype)
        self.position_ids = self._position_layer(positions)
        rows = {"source": self.max_source_length, "target": self.max_target_length}
        if self.position_ids is not None:
            rows = dict.fromkeys(rows, self.position_ids.max_positions)
        table = "learned" if self.position_ids is not None else positions
        self.source_embedding = TokenAndPositionEmbedding(
            self.source_vocab_size, rows["source"], self.dim, positions=table, dtype=dtype, name="source_embedding",
        )
        self.target_embedding = TokenAndPositionEmbedding(
            self.target_vocab_size, rows["target"], self.dim, positions=table, dtype=dtype, name="target_embedding",
        )
        if self.share_embeddings:  # one Embedding layer in both (saved and loaded once)
            self.source_embedding.token_embedding = self.target_embedding.token_embedding
        self.embedding_dropout = keras.layers.Dropout(self.dropout, dtype=dtype, name="embedding_dropout")
        self.encoder_blocks = [EncoderBlock(**block_args, name=f"encoder_{i}") for i in range(self.encoder_layers)]
        self.decoder_blocks = [DecoderBlock(**block_args, name=f"decoder_{i}") for i in range(self.decoder_layers)]
        if self.norm_first:
            self.encoder_norm = keras.layers.LayerNormalization(epsilon=1e-5, dtype=dtype, name="encoder_norm")
            self.decoder_norm = keras.layers.LayerNormalization(epsilon=1e-5, dtype=dtype, name="decoder_norm")
        else:
            self.encoder_norm = self.decoder_norm = None
        if self.tie_embeddings:
            self.output_projection = None
        else:
            # logits in float32 even under mixed precision: the softmax and loss need the range
            self.output_projection = keras.layers.Dense(self.target_vocab_size, dtype="float32", name="output_projection")
        # Built at once (like KerasHub backbones): weights exist before the first call or a save.
        self.build()

    def _position_layer(self, positions):
        longest = max(self.max_source_length, self.max_target_length)
        if positions == "abacus":
            return AbacusPositions(2 * longest, name="position_ids")
        if positions == "randomized":
            return RandomizedPositions(2 * longest, longest, name="position_ids")
        if positions not in ("learned", "sinusoidal"):
            raise ValueError(f"positions must be learned, sinusoidal, abacus or randomized, not {positions!r}")
        return None

    def _positions(self, ids, start_index=0):
        """Inference position ids for ``ids`` (None: the embeddings count from ``start_index``)."""
        if self.position_ids is None:
            return None
        return self.position_ids(ids, start_index=start_index, training=False)

    # --- building -------------------------------------------------------------------------

    def build(self, input_shape=None):
        if self.built:
            return
        if self.tie_embeddings:
            self.output_bias = self.add_weight(shape=(self.target_vocab_size,), initializer="zeros", name="output_bias")
        # Run once on a dummy batch so every sub-layer creates its weights (two tokens: Keras warns
        # of a softmax over one key in a pretrained BERT's attention).
        dummy = ops.ones((1, 2), dtype="int32")
        self._forward(dummy, dummy, training=False)
        self.built = True

    # --- full forward pass (training, scoring, full-recompute decoding) --------------------

    def call(self, inputs, training=None):
        return self._forward(inputs["source"], inputs["target_in"], training=training)

    def _forward(self, source_ids, target_in, training=None):
        source_positions = target_positions = None
        if self.position_ids is not None and training:  # one draw per row for source and target alike
            source_length, target_length = ops.shape(source_ids)[1], ops.shape(target_in)[1]
            # static widths (JAX, fixed shapes) stay Python ints: a traced length cannot size the draw
            longest = (max(source_length, target_length) if isinstance(source_length, int) and isinstance(target_length, int)
                       else ops.maximum(source_length, target_length))
            drawn = self.position_ids(source_ids, length=longest, training=True)
            source_positions, target_positions = drawn[:, :source_length], drawn[:, :target_length]
        encoder_outputs, source_mask = self.encode(source_ids, training=training, position_ids=source_positions)
        return self.decode(target_in, encoder_outputs, source_mask, training=training, position_ids=target_positions)

    def encode(self, source_ids, training=None, position_ids=None):
        """``(batch, S)`` ids -> ``(encoder_outputs (batch, S, dim), source_mask (batch, S) bool)``;
        ``position_ids`` (training) replace the inference ones of an extrapolating scheme."""
        source_ids = ops.cast(source_ids, "int32")
        source_mask = padding_mask(source_ids)
        if position_ids is None:
            position_ids = self._positions(source_ids)
        x = self.embedding_dropout(self.source_embedding(source_ids, position_ids=position_ids), training=training)
        for block in self.encoder_blocks:
            x = block(x, mask=source_mask, training=training)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return x, source_mask

    def decode(self, target_in, encoder_outputs, source_mask, training=None, position_ids=None):
        """Teacher-forced decoder: ``target_in (batch, T)`` -> logits ``(batch, T, target_vocab)``."""
        target_in = ops.cast(target_in, "int32")
        target_mask = padding_mask(target_in)
        if position_ids is None:
            position_ids = self._positions(target_in)
        x = self.embedding_dropout(self.target_embedding(target_in, position_ids=position_ids), training=training)
        for block in self.decoder_blocks:
            x = block(x, encoder_outputs, mask=target_mask, encoder_mask=source_mask, training=training)
        return self._logits(x)

    def decoder_states(self, source_ids, target_in):
        """Teacher-forced (inference mode) final decoder states, the vectors the output projection
        reads: ``source_ids (batch, S)``, ``target_in (batch, T)`` -> float32 ``(batch, T, dim)``
        (kNN-MT's datastore keys, :mod:`kformer.models.retrieval`)."""
        encoder_outputs, source_mask = self.encode(source_ids, training=False)
        return self.teacher_forced_states(target_in, encoder_outputs, source_mask)

    def teacher_forced_states(self, target_in, encoder_outputs, source_mask):
        """:meth:`decoder_states` from the encoder's outputs ``(batch, S, dim)`` and ``source_mask
        (batch, S)``: ``target_in (batch, T)`` -> float32 ``(batch, T, dim)``."""
        target_in = ops.cast(target_in, "int32")
        x = self.target_embedding(target_in, position_ids=self._positions(target_in))
        for block in self.decoder_blocks:
            x = block(x, encoder_outputs, mask=padding_mask(target_in), encoder_mask=source_mask, training=False)
        return self.final_state(x)

    def final_state(self, x):
        """The last decoder block's output ``(..., dim)`` -> the float32 state the output
        projection reads (after the final layer norm of pre-norm blocks)."""
        if self.decoder_norm is not None:
            x = self.decoder_norm(x)
        return ops.cast(x, "float32")

    def project(self, state):
        """Final decoder states ``(..., dim)`` (:meth:`final_state`) -> float32 logits ``(..., target_vocab)``."""
        return self._project(state)

    def _logits(self, x):
        if self.decoder_norm is not None:
            x = self.decoder_norm(x)
        return self._project(x)

    def _project(self, x):
        if self.output_projection is not None:
            return self.output_projection(x)
        table = self.target_embedding.token_embedding.embeddings  # float32 logits, as the Dense above
        return ops.matmul(ops.cast(x, "float32"), ops.transpose(ops.cast(table, "float32"))) + self.output_bias

    # --- incremental decoding -------------------------------------------------------------

    def cross_attention_caches(self, encoder_outputs):
        """The encoder's keys/values for every decoder block, computed once per generation.

        Returns a list (one per decoder block) of ``(batch, 2, S, heads, dim // heads)``.
        """
        return [block.cross_attention_cache(encoder_outputs) for block in self.decoder_blocks]

    def empty_self_attention_caches(self, batch_size, max_length):
        """Zero key/value caches, one ``(batch, 2, max_length, heads, dim // heads)`` per block."""
        return [block.empty_self_attention_cache(batch_size, max_length) for block in self.decoder_blocks]

    def decode_step(self, token_ids, index, self_caches, cross_caches, source_mask):
        """:meth:`decode_state_step`, projected: ``(logits (batch, target_vocab), new_self_caches)``."""
        state, new_caches = self.decode_state_step(token_ids, index, self_caches, cross_caches, source_mask)
        return self._project(state), new_caches

    def decode_state_step(self, token_ids, index, self_caches, cross_caches, source_mask):
        """Decode one position from the caches.

        Args:
            token_ids: ``(batch, 1)`` int, the token at position ``index`` of ``target_in``.
            index: int (or scalar int tensor), that position.
            self_caches: list of per-block self-attention caches (see
                :meth:`empty_self_attention_caches`); positions ``< index`` are filled.
            cross_caches: list from :meth:`cross_attention_caches`.
            source_mask: ``(batch, S)`` bool from :meth:`encode`.

        Returns:
            ``(state (batch, dim) float32, new_self_caches)``: the final decoder state
            (:meth:`final_state`, what :meth:`project` turns into logits); the new caches hold
            this position's keys/values too.
        """
        token_ids = ops.cast(token_ids, "int32")
        x = self.target_embedding(token_ids, start_index=index, position_ids=self._positions(token_ids, index))
        new_caches = []
        for block, self_cache, cross_cache in zip(self.decoder_blocks, self_caches, cross_caches, strict=True):
            x, self_cache = block(
                x,
                None,
                encoder_mask=source_mask,
                self_attention_cache=self_cache,
                cache_update_index=index,
                cross_attention_cache=cross_cache,
                training=False,
            )
            new_caches.append(self_cache)
        return self.final_state(x)[:, 0, :], new_caches

    # --- attention maps -------------------------------------------------------------------

    def attention_maps(self, source_ids, target_in):
        """Attention weights of every layer and head for one batch (inference mode).

        Args:
            source_ids: ``(batch, S)`` int; target_in: ``(batch, T)`` int.

        Returns:
            dict of numpy arrays ``(batch, layers, heads, Lq, Lk)``: ``"encoder"`` (S x S; absent
            without encoder blocks), ``"decoder_self"`` (T x T) and ``"cross"`` (T x S).
        """
        source_ids = ops.cast(ops.convert_to_tensor(source_ids), "int32")
        target_in = ops.cast(ops.convert_to_tensor(target_in), "int32")
        s, t = int(source_ids.shape[1]), int(target_in.shape[1])
        # Keras warns of a softmax over one key (a one-token input): one more position, padding,
        # changes no real position's weights (masked as a key, causal in the decoder); cut after
        x, source_mask, encoder_maps = self.encoder_attention(_at_least_two(source_ids))
        self_maps, cross_maps = self.decoder_attention(_at_least_two(target_in), x, source_mask)

        def stack(maps, rows, cols):
            return ops.convert_to_numpy(ops.stack(maps, axis=1))[..., :rows, :cols]

        maps = {"encoder": (encoder_maps, s, s), "decoder_self": (self_maps, t, t), "cross": (cross_maps, t, s)}
        return {name: stack(*layers) for name, layers in maps.items() if layers[0]}  # no encoder blocks: no encoder map

    def encoder_attention(self, source_ids):
        """Inference encoding with its maps: ``(encoder_outputs (batch, S, dim), source_mask
        (batch, S), [(batch, heads, S, S) per encoder block])``."""
        source_mask = padding_mask(source_ids)
        x = self.source_embedding(source_ids, position_ids=self._positions(source_ids))
        encoder_maps = []
        for block in self.encoder_blocks:
            x, scores = block(x, mask=source_mask, return_attention_scores=True, training=False)
            encoder_maps.append(scores)
        if self.encoder_norm is not None:
            x = self.encoder_norm(x)
        return x, source_mask, encoder_maps

    def decoder_attention(self, target_in, encoder_outputs, source_mask):
        """The decoder's maps over ``target_in (batch, T)``: ``(self_maps, cross_maps)``, one
        ``(batch, heads, T, T)`` and one ``(batch, heads, T, S)`` per decoder block."""
        y = self.target_embedding(target_in, position_ids=self._positions(target_in))
        self_maps, cross_maps = [], []
        for block in self.decoder_blocks:
            y, self_scores, cross_scores = block(y, encoder_outputs, mask=padding_mask(target_in),
                                                 encoder_mask=source_mask, return_attention_scores=True,
                                                 training=False)
            self_maps.append(self_scores)
            cross_maps.append(cross_scores)
        return self_maps, cross_maps

    # --- serialization --------------------------------------------------------------------

    def get_config(self):
        return {
            **super().get_config(),
            "source_vocab_size": self.source_vocab_size,
            "target_vocab_size": self.target_vocab_size,
            "max_source_length": self.max_source_length,
            "max_target_length": self.max_target_length,
            "dim": self.dim,
            "heads": self.heads,
            "ff_dim": self.ff_dim,
            "encoder_layers": self.encoder_layers,
            "decoder_layers": self.decoder_layers,
            "dropout": self.dropout,
            "positions": self.positions,
            "tie_embeddings": self.tie_embeddings,
            "norm_first": self.norm_first,
            "share_embeddings": self.share_embeddings,
            "attention_window": self.attention_window,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def _at_least_two(ids):
    """``(batch, L)`` ids, padded with id 0 to two positions when ``L`` is 1."""
    return ops.pad(ids, [[0, 0], [0, 1]]) if int(ids.shape[1]) == 1 else ids


def compile_seq2seq(
    model, learning_rate, warmup_steps, total_steps, label_smoothing=0.0, weight_decay=0.0, clipnorm=1.0, jit_compile=False,
    slow_variables=(), slow_scale=1.0,
):
    """Compile ``model`` for teacher-forced training: Adam(W) with linear warmup + cosine decay,
    masked cross-entropy (optional label smoothing) and masked token accuracy.

    ``total_steps=None`` gives a constant ``learning_rate`` instead, for a caller whose callback
    sets the rate itself (e.g. a schedule over a time budget).

    ``jit_compile`` defaults to False: on CPU, XLA's compile time (tens of seconds) outweighs its
    per-step gain for models this small.

    ``slow_variables`` (a pretrained encoder's, fine-tuned) move at ``slow_scale`` times the rate
    (:class:`~kformer.models.pretrained_seq2seq.ScaledRateAdam`).
    """
    from kformer.training import WarmupDecay

    schedule = float(learning_rate) if total_steps is None else WarmupDecay(learning_rate, warmup_steps, total_steps)
    optimizer_args = dict(learning_rate=schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9, clipnorm=clipnorm)
    if slow_variables:
        from kformer.models.pretrained_seq2seq import ScaledRateAdam

        optimizer = ScaledRateAdam(slow_scale, slow_variables, weight_decay=weight_decay or None, **optimizer_args)
    elif weight_decay:
        optimizer = keras.optimizers.AdamW(weight_decay=weight_decay, **optimizer_args)
    else:
        optimizer = keras.optimizers.Adam(**optimizer_args)
    model.compile(
        optimizer=optimizer,
        loss=MaskedSparseCategoricalCrossentropy(label_smoothing=label_smoothing),
        metrics=[MaskedAccuracy(name="accuracy")],
        jit_compile=jit_compile,
    )
    return model
