"""A classifier's export folder (``kformer export``'s ``--out``) loaded as a classifier, so
``kformer serve`` and ``kformer.load`` take an export as they take a model folder.

:class:`ExportedClassifier` is a :class:`~kformer.tasks.classify.Classifier` whose probabilities
are the export's: ``model.onnx`` on ONNX Runtime (its tokenizer rebuilt from the export's
``vocab.txt`` and ``metadata.json["tokenizer"]``), or the SavedModel (its ``texts`` signature
where it has one: raw strings in). The wide n-gram part, its mix and the out-of-scope score
(``ood_score``: the best probability, minus a distance, the TF-IDF novelty or the combined rule)
are in the exported graph; the calibrated
threshold and the labels come from the metadata, so ``predict`` answers as the model folder does.
No attention maps (they need the Keras network: serve the model folder).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kformer.tasks.base import FromExport, TaskModel, check_texts
from kformer.tasks.classify.model import Classifier
from kformer.tasks.classify.ood import PROBABILITY


class ExportedClassifier(FromExport, Classifier):
    """A classifier answering from an export folder (see the module)."""

    def __init__(self, folder: Path, metadata: dict):
        spec = metadata["tokenizer"]
        TaskModel.__init__(self, folder, {"labels": metadata["labels"], "kind": metadata["kind"],
                                          "threshold": metadata.get("threshold"), **metadata})
        self.labels = [str(label) for label in metadata["labels"]]
        self.kind, self.model, self.wide, self.predictor, self.ood = metadata["kind"], None, None, None, None
        self.threshold = None if metadata.get("threshold") is None else float(metadata["threshold"])
        self.format, self.spec = metadata["format"], spec
        # exports written before the ood_score output route by the best probability
        self.exported_ood_kind = (metadata.get("ood") or {}).get("score", PROBABILITY)
        self.max_chars = (metadata.get("wide") or {}).get("max_chars")  # the wide part reads the texts
        vocabulary = (Path(folder) / spec["vocabulary_file"]).read_text(encoding="utf-8").splitlines()
        self.tokenizer = _tokenizer(spec, vocabulary)
        if self.format == "onnx":
            from kformer.extras import require
            from kformer.threads import thread_count

            require("serving an ONNX export", "export", ("onnxruntime",), field="model_dir")
            import onnxruntime as ort

            options = ort.SessionOptions()
            options.intra_op_num_threads, options.inter_op_num_threads = thread_count(), 1
            self.session = ort.InferenceSession(str(Path(folder) / "model.onnx"), options,
                                                providers=["CPUExecutionProvider"])
            # exports written before the ood_score output lack it
            self.onnx_outputs = [output.name for output in self.session.get_outputs()
                                 if output.name in ("probabilities", "ood_score")]
        else:
            import tensorflow as tf

            self.signatures = tf.saved_model.load(str(Path(folder) / "1")).signatures

    @property
    def ood_kind(self) -> str:
        return self.exported_ood_kind

    @property
    def max_length(self) -> int:
        return int(self.spec["max_length"])

    def metadata(self) -> dict[str, Any]:
        return {**TaskModel.metadata(self), "labels": list(self.labels), "kind": self.kind,
                "runtime": f"{self.format} export"}

    def features(self, texts: Sequence[str]) -> np.ndarray:
        from kformer.text.vocabulary import CHARS_PER_TOKEN_LIMIT, clean_text, encode

        if self.kind != "bert":
            return encode(self.tokenizer, texts)
        from kformer.models.pretrained import bert_token_ids

        return bert_token_ids(self.tokenizer, [clean_text(t, self.max_length * CHARS_PER_TOKEN_LIMIT) for t in texts])

    def probabilities(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        return self.scored(texts, batch_size)[0]

    def scored(self, texts: Sequence[str], batch_size: int = 64) -> tuple[np.ndarray, np.ndarray]:
        texts = check_texts(texts)
        parts = [self._batch(texts[i:i + batch_size]) for i in range(0, len(texts), batch_size)]
        if not parts:
            return np.zeros((0, len(self.labels)), dtype="float32"), np.zeros(0)
        probs = np.concatenate([part[0] for part in parts])
        scores = [part[1] for part in parts]
        if any(score is None for score in scores):  # an export without the ood_score output
            return probs, probs.max(axis=1).astype("float64")
        return probs, np.concatenate(scores).astype("float64")

    def _batch(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray | None]:
        """``(probabilities (n, classes), ood_score (n,) or None where the export lacks it)``."""
        if self.format != "onnx" and "texts" in self.signatures:
            import tensorflow as tf

            return _scored(self.signatures["texts"](texts=tf.constant(texts)))
        from kformer.data.batching import bucket_width

        ids = self.features(texts)  # cut as kformer cuts a batch: to the width bucket of its longest row
        ids = ids[:, : bucket_width(max(int((ids != 0).sum(axis=1).max()), 1), ids.shape[1])]
        cut = [text[: self.max_chars] for text in texts] if self.max_chars else None
        if self.format == "onnx":
            feed = {"token_ids": ids, **({"texts": np.array(cut, dtype=object)} if cut else {})}
            return _scored(dict(zip(self.onnx_outputs, self.session.run(self.onnx_outputs, feed), strict=True)))
        import tensorflow as tf

        extra = {"texts": tf.constant(cut)} if cut else {}
        return _scored(self.signatures["serving_default"](token_ids=tf.constant(ids), **extra))

    def network_probabilities(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        return self.probabilities(texts, batch_size)  # the export's graph holds the whole classifier

    def warmup(self) -> None:
        self.probabilities(["warm up"])


def _scored(outputs) -> tuple[np.ndarray, np.ndarray | None]:
    """An export's outputs (by name; NumPy arrays or tensors) -> ``(probabilities, ood_score or None)``."""
    score = outputs.get("ood_score")
    return np.asarray(outputs["probabilities"]), None if score is None else np.asarray(score)


def _tokenizer(spec: dict, vocabulary: list[str]):
    """kformer's tokenizer as the export's metadata describes it (a BERT preprocessor for ``bert``)."""
    from kformer.text.vocabulary import make_tokenizer

    if spec["kind"] == "word":
        return make_tokenizer(vocabulary, spec["max_length"], "word", spec["truncation"])
    if spec["kind"] == "wordpiece":
        return make_tokenizer(vocabulary, spec["max_length"], "wordpiece")
    import keras_hub

    tokenizer = keras_hub.models.BertTokenizer(vocabulary=vocabulary, lowercase=spec["lowercase"],
                                               strip_accents=bool(spec.get("strip_accents", False)))
    return keras_hub.models.BertTextClassifierPreprocessor(tokenizer, sequence_length=spec["max_length"])


def load_export(folder: str | Path, metadata: dict) -> ExportedClassifier:
    """The classifier of an export folder (``metadata``: its metadata.json)."""
    return ExportedClassifier(Path(folder), metadata)
