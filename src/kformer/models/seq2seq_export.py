"""The export endpoints of a :class:`~kformer.models.seq2seq.Seq2SeqTransformer` (translation and
arithmetic models alike): encode once, one decoder step, and greedy decoding whole.

``B`` batch, ``S`` source ids, ``T`` target ids so far, ``D`` model width, ``V`` target vocabulary:

* ``encode`` (``encoder.onnx``): ``source_ids`` int32 ``(B, S)`` -> ``encoder_outputs`` float32 ``(B, S, D)``;
* ``decode_step`` (``decoder_step.onnx``): ``target_in`` int32 ``(B, T)`` (``[START]`` + tokens so
  far), ``encoder_outputs``, ``source_ids`` -> ``logits`` float32 ``(B, V)`` of the next token;
* ``serving_default`` (SavedModel only): ``source_ids`` -> ``target_ids`` int32
  ``(B, max_target_length)``, greedy decoding, ``[END]`` then 0s.
"""

from __future__ import annotations

from kformer.models.export_plan import Endpoint, Tensor
from kformer.text.specials import END_ID, PAD_ID, START_ID


def seq2seq_endpoints(model, decode_length: dict[str, float] | None = None) -> list[Endpoint]:
    """The three endpoints of ``model``. ``decode_length`` (``{"per_source_token": a, "extra": b}``)
    caps each greedy row at ``ceil(a * n) + b`` tokens for a source of ``n`` ids, as the model's
    task decodes in Python; None: every row may use ``max_target_length``."""
    import tensorflow as tf

    from kformer.layers import padding_mask
    from kformer.models.generation import greedy_loop

    source_ids = Tensor("source_ids", "int32", (None, None),
                        f"source token ids, 0-padded, at most {model.max_source_length} per row")
    encoder_outputs = Tensor("encoder_outputs", "float32", (None, None, model.dim), "the encode signature's output")
    target_in = Tensor("target_in", "int32", (None, None),
                       f"[START] (id {START_ID}) and the target ids chosen so far (at most max_target_length)")
    logits = Tensor("logits", "float32", (None, model.target_vocab_size), "next-token logits after target_in")
    target_ids = Tensor("target_ids", "int32", (None, model.max_target_length),
                        f"greedy output ids: tokens, [END] (id {END_ID}), then 0s")

    def encode(source):
        return {"encoder_outputs": tf.cast(model.encode(source, training=False)[0], tf.float32)}

    def decode_step(target, encoded, source):
        encoded = tf.cast(encoded, model.dtype_policy.compute_dtype)
        step = model.decode(target, encoded, padding_mask(source), training=False)[:, -1, :]
        return {"logits": tf.cast(step, tf.float32)}

    def greedy(source):
        length = model.max_target_length
        if decode_length is None:
            limits = tf.fill(tf.shape(source)[:1], length)
        else:  # float64: the same ceil as Python's
            ids = tf.reduce_sum(tf.cast(tf.not_equal(source, PAD_ID), tf.float64), axis=1)
            limits = tf.minimum(tf.cast(tf.math.ceil(decode_length["per_source_token"] * ids), tf.int32)
                                + int(decode_length["extra"]), length)
        return {"target_ids": greedy_loop(model, source, tf.constant(length, tf.int32), limits, length, True)}

    return [
        Endpoint("serving_default", greedy, (source_ids,), (target_ids,)),
        Endpoint("encode", encode, (source_ids,), (encoder_outputs,), onnx="encoder"),
        Endpoint("decode_step", decode_step, (target_in, encoder_outputs, source_ids), (logits,), onnx="decoder_step"),
    ]


def seq2seq_info(model) -> dict:
    """``metadata.json`` keys every seq2seq export has: lengths and the special ids."""
    return {"max_source_length": model.max_source_length, "max_target_length": model.max_target_length,
            "special_ids": {"pad": PAD_ID, "start": START_ID, "end": END_ID}}
