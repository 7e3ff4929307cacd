"""Classify with a kformer ONNX export -- onnxruntime and NumPy only (and Python's standard
library; ``onnx_wordpiece.py`` beside it), no kformer: it tokenises as ``metadata.json["tokenizer"]`` says.

    python docs/onnx_classify_client.py EXPORT_DIR "my laptop screen is broken" "refund please"

EXPORT_DIR is what ``kformer export MODEL_DIR --format onnx --out EXPORT_DIR`` wrote for a
classifier: ``model.onnx`` (``token_ids`` -- and ``texts`` when the model's wide n-gram part runs
inside the graph: mixed in, or read by the ``tfidf`` or ``combined`` score -- to ``probabilities``,
``labels`` and ``ood_score``, the score the calibrated threshold applies to), ``vocab.txt``,
``labels.txt`` and ``metadata.json``. ONNX has no operator for the Unicode normalisation and the
word splitting kformer's tokenizers do, so they are here: kformer's word tokenizer (``kind``
``word``) and KerasHub's WordPiece (``wordpiece``; ``bert`` adds ``[CLS]``/``[SEP]``). The answers
are ``kformer predict``'s, the calibrated threshold included (``tests/test_export.py`` checks it).
"""

from __future__ import annotations

import json
import re
import sys
import unicodedata
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parent))  # onnx_wordpiece.py lies beside this file
from onnx_wordpiece import WordPieces  # noqa: E402

HTML_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
WORD_TOKEN = re.compile(r"\w+|[^\w\s]")
CHARS_PER_TOKEN = 16


class OnnxClassifier:
    """The export in ``folder``: ``predict(texts)`` -> one dict per text, as ``kformer predict``."""

    def __init__(self, folder: str | Path):
        folder = Path(folder)
        self.meta = json.loads((folder / "metadata.json").read_text(encoding="utf-8"))
        self.spec = self.meta["tokenizer"]
        self.vocabulary = (folder / self.spec["vocabulary_file"]).read_text(encoding="utf-8").splitlines()
        self.ids = {token: i for i, token in enumerate(self.vocabulary)}
        self.wordpiece = WordPieces(self.spec, self.ids)
        self.session = ort.InferenceSession(str(folder / "model.onnx"), providers=["CPUExecutionProvider"])

    def token_ids(self, texts: list[str]) -> np.ndarray:
        """``(len(texts), max_length)`` int32, as kformer tokenises."""
        length = self.spec["max_length"]
        ids = np.full((len(texts), length), self.spec["pad_id"], dtype="int32")
        for row, text in enumerate(texts):
            tokens = self.word_ids(text) if self.spec["kind"] == "word" else self.piece_ids(text)
            ids[row, : len(tokens[:length])] = tokens[:length]
            if self.spec["kind"] != "bert" and not tokens:
                ids[row, 0] = self.spec["unknown_id"]
        return ids

    # --- kformer's word tokenizer (kind "word") ---

    def word_ids(self, text: str) -> list[int]:
        spec, limit = self.spec, self.spec["max_length"] * CHARS_PER_TOKEN
        if len(text) > 2 * limit:
            text = text[:limit] if spec["truncation"] == "head" else text[:limit] + " " + text[-limit:]
        text = HTML_BREAK.sub(" ", text.lower())
        if not text.isascii():
            text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
        words = WORD_TOKEN.findall(text)
        keep = max(1, spec["max_length"] // 2) if spec["word_pairs"] else spec["max_length"]
        if len(words) > keep:
            head = {"head": keep, "tail": 0, "head_tail": keep // 4}[spec["truncation"]]
            words = words[:head] + words[len(words) - (keep - head):]
        ids = [self.ids.get(word, spec["unknown_id"]) for word in words]
        if spec["word_pairs"]:
            pairs = [self.ids.get(f"{a} {b}") for a, b in zip(words, words[1:], strict=False)]
            ids += [i for i in pairs if i is not None][: spec["max_length"] - len(ids)]
        return ids

    # --- KerasHub WordPiece (kinds "wordpiece" and "bert") ---

    def piece_ids(self, text: str) -> list[int]:
        spec = self.spec
        text = " ".join(HTML_BREAK.sub(" ", text).split())[: spec["max_length"] * CHARS_PER_TOKEN]
        ids = [self.ids[piece] for piece in self.wordpiece.pieces(text)]
        if spec["kind"] == "bert":
            return [self.ids["[CLS]"], *ids[: spec["max_length"] - 2], self.ids["[SEP]"]]
        return ids

    # --- the model ---

    def scored(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """Class probabilities (texts, classes) and in-scope scores (texts,): the best probability,
        or minus a distance of the text's vector (``metadata.json["ood"]`` says which)."""
        feed = {"token_ids": self.token_ids(texts)}
        if self.meta.get("wide"):  # the wide n-gram part reads the texts (cut to its length) in the graph
            feed["texts"] = np.array([text[: self.meta["wide"]["max_chars"]] for text in texts], dtype=object)
        probabilities, scores = self.session.run(["probabilities", "ood_score"], feed)
        return probabilities, scores

    def predict(self, texts: list[str], top_k: int = 1) -> list[dict]:
        """Label, probability, unknown (ood_score below the calibrated threshold) and the top_k labels."""
        labels, threshold = self.meta["labels"], self.meta.get("threshold")
        results = []
        for row, score in zip(*self.scored(texts), strict=True):
            order = np.argsort(-row, kind="stable")[:top_k]
            unknown = threshold is not None and float(score) < threshold
            results.append({"label": self.meta["unknown_label"] if unknown else labels[order[0]],
                            "probability": round(float(row[order[0]]), 6), "unknown": unknown,
                            "top_k": [{"label": labels[j], "probability": round(float(row[j]), 6)} for j in order]})
        return results


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: python onnx_classify_client.py EXPORT_DIR TEXT [TEXT ...]")
    for answer in OnnxClassifier(sys.argv[1]).predict(sys.argv[2:]):
        print(json.dumps(answer, ensure_ascii=False))
