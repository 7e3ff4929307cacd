"""The export endpoints of a :class:`~kformer.models.seq2seq.Seq2SeqTransformer` (translation and
arithmetic models alike): encode once, one cached decoder step, and greedy decoding whole.

``B`` batch, ``S`` source ids, ``N`` decoder layers, ``H`` heads, ``K`` = model width / ``H``,
``T`` the self-attention cache's length (the client's choice; at most ``max_target_length``),
``V`` the target vocabulary:

* ``encode`` (``encoder.onnx``): ``source_ids`` int32 ``(B, S)`` -> ``encoder_outputs`` float32
  ``(B, S, D)`` and ``cross_cache`` float32 ``(B, N, 2, S, H, K)``: every decoder layer's
  cross-attention keys and values, computed once per source (a pretrained encoder's model --
  :class:`~kformer.models.pretrained_seq2seq.PretrainedEncoderSeq2Seq` -- runs its BERT backbone
  and bridge here: its ``encode`` makes the padding mask and segment ids from the ids);
* ``decode_step`` (``decoder_step.onnx``): ``token`` int32 ``(B, 1)`` (``[START]`` first, then the
  token chosen last), ``index`` int32 scalar (its position, from 0), ``self_cache`` float32
  ``(B, N, 2, T, H, K)`` (zeros at index 0), ``cross_cache``, ``source_ids`` -> ``logits`` float32
  ``(B, V)`` of the next token and ``new_self_cache`` (the cache with this position's keys and
  values written at ``index``). Each step reads the cache instead of the whole prefix again, so
  decoding ``n`` tokens costs ``n`` steps of one token each -- Keras' cached greedy decoding,
  step for step (:meth:`~kformer.models.seq2seq.Seq2SeqTransformer.decode_step`);
* ``serving_default`` (SavedModel only): ``source_ids`` -> ``target_ids`` int32
  ``(B, max_target_length)``, greedy decoding as the task decodes, ``[END]`` then 0s.

``docs/onnx_translate_client.py`` decodes with the two ONNX files (onnxruntime, sentencepiece and
NumPy; ``docs/onnx_wordpiece.py`` for a pretrained encoder's WordPiece source): the same greedy
choice as kformer (ids ``FORBIDDEN`` never chosen, the repeat limit, each row's length cap), so it
gives ``Translator.translate``'s greedy translations.
"""

from __future__ import annotations

from kformer.models.decode_loops import FORBIDDEN, REPEAT_SPAN
from kformer.models.export_plan import Endpoint, Tensor
from kformer.text.specials import END_ID, PAD_ID, START_ID


def seq2seq_endpoints(model, decode_length: dict[str, float] | None = None, max_repeat: int = 0,
                      notes: dict[str, str] | None = None, knn=None, knn_k: int = 0) -> list[Endpoint]:
    """The three endpoints of ``model``. ``decode_length`` (``{"per_source_token": a, "extra": b}``)
    caps each greedy row at ``ceil(a * n) + b`` tokens for a source of ``n`` ids, as the model's
    task decodes in Python; None: every row may use ``max_target_length``. ``max_repeat``: the
    task's repeat limit (0: none; :func:`~kformer.models.generation.greedy_decode`). ``notes``:
    more words on a tensor's meaning, by name (e.g. what a pretrained encoder's ids are). ``knn``
    and ``knn_k`` (:func:`~kformer.models.retrieval.held_in_weights`): kNN-MT in the graph --
    ``decode_step``'s ``logits`` are then the mixture's log-probabilities (the same argmax rule)
    and greedy decoding mixes as the task does."""
    import tensorflow as tf

    from kformer.layers import padding_mask
    from kformer.models.decode_loops import next_scores
    from kformer.models.generation import greedy_loop

    layers, heads = model.decoder_layers, model.heads
    cache_dims = f"(B, {layers} layers, 2 = keys/values, {{}}, {heads} heads, {model.dim // heads})"
    notes = {name: f" ({note})" for name, note in (notes or {}).items()}
    source_ids = Tensor("source_ids", "int32", (None, None), f"source token ids, 0-padded, at most "
                        f"{model.max_source_length} per row" + notes.get("source_ids", ""))
    encoder_outputs = Tensor("encoder_outputs", "float32", (None, None, model.dim),
                             "the encoder's outputs" + notes.get("encoder_outputs", ""))
    cross_cache = Tensor("cross_cache", "float32", (None, layers, 2, None, heads, model.dim // heads),
                         "each decoder layer's cross-attention keys and values of the source: "
                         + cache_dims.format("S"))
    token = Tensor("token", "int32", (None, 1), f"the token at position index: [START] (id {START_ID}) at 0, "
                   "then the token chosen at the step before")
    index = Tensor("index", "int32", (), "the position of token (0, 1, ...)")
    self_cache = Tensor("self_cache", "float32", (None, layers, 2, None, heads, model.dim // heads),
                        "the self-attention keys and values of the positions before index (zeros at index 0; "
                        f"T >= the positions to decode, at most {model.max_target_length}): "
                        + cache_dims.format("T"))
    logits = Tensor("logits", "float32", (None, model.target_vocab_size), "the next token's logits" if knn is None
                    else f"the next token's log-probabilities: the kNN-MT mixture of the model's softmax and the "
                    f"values of the datastore's {knn_k} keys nearest the decoder's state (metadata retrieval)")
    new_self_cache = Tensor("new_self_cache", "float32", self_cache.shape,
                            "self_cache with the keys and values of position index written in")
    target_ids = Tensor("target_ids", "int32", (None, model.max_target_length),
                        f"greedy output ids: tokens, [END] (id {END_ID}), then 0s")
    compute = model.dtype_policy.compute_dtype

    def encode(source):
        encoded, _ = model.encode(source, training=False)
        caches = tf.stack(model.cross_attention_caches(encoded), axis=1)
        return {"encoder_outputs": tf.cast(encoded, tf.float32), "cross_cache": tf.cast(caches, tf.float32)}

    def decode_step(token_ids, position, cache, cross, source):
        cache, cross = tf.cast(cache, compute), tf.cast(cross, compute)
        step, caches = next_scores(model, token_ids, position, [cache[:, i] for i in range(layers)],
                                   [cross[:, i] for i in range(layers)], padding_mask(source), knn, knn_k)
        return {"logits": tf.cast(step, tf.float32), "new_self_cache": tf.cast(tf.stack(caches, axis=1), tf.float32)}

    def greedy(source):
        length = model.max_target_length
        if decode_length is None:
            limits = tf.fill(tf.shape(source)[:1], length)
        else:  # float64: the same ceil as Python's
            ids = tf.reduce_sum(tf.cast(tf.not_equal(source, PAD_ID), tf.float64), axis=1)
            limits = tf.minimum(tf.cast(tf.math.ceil(decode_length["per_source_token"] * ids), tf.int32)
                                + int(decode_length["extra"]), length)
        generated = greedy_loop(model, source, tf.constant(length, tf.int32), limits, length, True, max_repeat,
                                knn, knn_k)
        return {"target_ids": generated}

    return [
        Endpoint("serving_default", greedy, (source_ids,), (target_ids,)),
        Endpoint("encode", encode, (source_ids,), (encoder_outputs, cross_cache), onnx="encoder"),
        Endpoint("decode_step", decode_step, (token, index, self_cache, cross_cache, source_ids),
                 (logits, new_self_cache), onnx="decoder_step"),
    ]


def seq2seq_info(model, max_repeat: int = 0) -> dict:
    """``metadata.json`` keys every seq2seq export has: lengths, the special ids and how kformer
    chooses each greedy token (what a client does to give kformer's outputs)."""
    return {"max_source_length": model.max_source_length, "max_target_length": model.max_target_length,
            "special_ids": {"pad": PAD_ID, "start": START_ID, "end": END_ID},
            "decoder": {"layers": model.decoder_layers, "heads": model.heads, "key_dim": model.dim // model.heads},
            "greedy": {"forbidden_ids": list(FORBIDDEN), "max_repeat": max_repeat, "repeat_span": REPEAT_SPAN,
                       "rule": "each step: logits of forbidden_ids -> -inf; with max_repeat > 0, for each span p in "
                               "1..repeat_span, when the last (max_repeat + 1) * p - 1 tokens repeat with period p, "
                               "the token p back -> -inf; take the argmax; a row ends at [END] or its length cap"}}
