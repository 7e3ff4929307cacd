"""Greedy decoding with a seq2seq export folder (``kformer export``'s ``--out`` of a translator or an
arithmetic model), for serving an export: :class:`ExportedDecoder`.

ONNX: ``encoder.onnx`` once, then one ``decoder_step.onnx`` call per token with the self-attention
cache (:mod:`kformer.models.seq2seq_export`), the greedy choice kformer's own
(:data:`~kformer.models.decode_loops.FORBIDDEN`, :func:`~kformer.models.generation.forbid_repeats`,
each row's length cap) -- the same loop as ``docs/onnx_translate_client.py``, which cannot import
kformer. SavedModel: its ``serving_default`` signature decodes whole (its repeat limit and length
caps are the ones it was exported with).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from kformer.errors import Unsupported
from kformer.models.decode_loops import FORBIDDEN
from kformer.text.specials import END_ID, PAD_ID, START_ID


class ExportedDecoder:
    """Source id lists -> greedy target id lists (up to, not including, ``[END]``) with the export in
    ``folder`` described by ``metadata`` (its metadata.json)."""

    def __init__(self, folder: str | Path, metadata: dict):
        self.folder, self.metadata = Path(folder), metadata
        self.format = metadata["format"]
        self.max_repeat = int(metadata.get("greedy", {}).get("max_repeat", 0))
        if self.format == "onnx":
            from kformer.extras import require
            from kformer.threads import thread_count

            require("serving an ONNX export", "export", ("onnxruntime",), field="model_dir")
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.intra_op_num_threads, options.inter_op_num_threads = thread_count(), 1
            self.encoder, self.step = (ort.InferenceSession(str(self.folder / name), options,
                                                            providers=["CPUExecutionProvider"])
                                       for name in ("encoder.onnx", "decoder_step.onnx"))
        else:
            import tensorflow as tf

            self.greedy = tf.saved_model.load(str(self.folder / "1")).signatures["serving_default"]

    def decode(self, sources: Sequence[Sequence[int]], caps: Sequence[int], max_repeat: int | None = None
               ) -> list[list[int]]:
        """Greedy ids of each source, each row at most its ``caps`` tokens; ``max_repeat`` (None:
        the export's) is the repeat limit, which a SavedModel carries fixed."""
        max_repeat = self.max_repeat if max_repeat is None else max_repeat
        source = np.zeros((len(sources), max(len(ids) for ids in sources)), dtype="int32")
        for row, ids in enumerate(sources):
            source[row, : len(ids)] = ids
        if self.format == "onnx":
            generated = self._onnx_greedy(source, np.asarray(caps), max_repeat)
        else:
            if max_repeat != self.max_repeat:
                raise Unsupported(f"this SavedModel decodes with max_repeat {self.max_repeat} (exported so); "
                                  "serve the ONNX export or the model folder for another", field="max_repeat")
            import tensorflow as tf

            generated = self.greedy(source_ids=tf.constant(source))["target_ids"].numpy()
        return [_until_end(row) for row in generated.tolist()]

    def _onnx_greedy(self, source: np.ndarray, caps: np.ndarray, max_repeat: int) -> np.ndarray:
        from kformer.models.generation import forbid_repeats

        decoder = self.metadata["decoder"]
        _, cross = self.encoder.run(None, {"source_ids": source})
        steps = int(caps.max())
        cache = np.zeros((len(source), decoder["layers"], 2, steps, decoder["heads"], decoder["key_dim"]), "float32")
        token = np.full((len(source), 1), START_ID, dtype="int32")
        generated = np.zeros((len(source), 0), dtype="int32")
        finished = np.zeros(len(source), dtype=bool)
        for index in range(steps):
            logits, cache = self.step.run(None, {"token": token, "index": np.array(index, dtype="int32"),
                                                 "self_cache": cache, "cross_cache": cross, "source_ids": source})
            logits[:, list(FORBIDDEN)] = -np.inf
            forbid_repeats(logits, generated, max_repeat)
            token = np.where(finished, PAD_ID, logits.argmax(axis=1)).astype("int32")[:, None]
            generated = np.concatenate([generated, token], axis=1)
            finished |= (token[:, 0] == END_ID) | (index + 1 >= caps)
            if finished.all():
                break
        return generated


def _until_end(row: list[int]) -> list[int]:
    return [token for token in (row[: row.index(END_ID)] if END_ID in row else row) if token != PAD_ID]
