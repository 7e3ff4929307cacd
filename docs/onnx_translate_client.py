"""Translate with a kformer ONNX export -- onnxruntime, sentencepiece and NumPy only (and
``onnx_wordpiece.py`` beside it), no kformer.

    python docs/onnx_translate_client.py EXPORT_DIR "one two" "three"
    python docs/onnx_translate_client.py EXPORT_DIR --domain news "one two"   # a model with corpus tags

EXPORT_DIR is what ``kformer export MODEL_DIR --format onnx --out EXPORT_DIR`` wrote for a
translator: ``encoder.onnx``, ``decoder_step.onnx``, the vocabulary files and ``metadata.json``,
which says everything this client follows (``source_text``, ``length_cap``, ``greedy``; a
pretrained (BERT) encoder's source is WordPiece ids, ``source_vocabulary_kind`` ``wordpiece``,
tokenised by ``onnx_wordpiece.py`` as ``metadata.json["wordpiece"]`` says; ``tag_rule``). The
encoder runs once per batch and gives every decoder layer's cross-attention keys and values; each
decoder step takes one token and the self-attention cache and returns the next token's logits and
the cache with that position added, so ``n`` tokens cost ``n`` one-token steps. The greedy choice
is kformer's (forbidden ids, the repeat limit, each row's length cap): the translations are
``Translator.translate``'s greedy ones (``tests/test_export.py`` checks it). A translator with a
retrieval (kNN-MT) datastore has it inside ``decoder_step.onnx`` (``metadata.json["retrieval"]``):
its ``logits`` are then the mixture's log-probabilities, and this client chooses from them alike.
"""

from __future__ import annotations

import json
import math
import sys
import unicodedata
from pathlib import Path

import numpy as np
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parent))  # onnx_wordpiece.py lies beside this file
from onnx_wordpiece import WordPieces  # noqa: E402


class OnnxDecoder:
    """The encoder and decoder step of any kformer seq2seq export in ``folder`` (translator or
    arithmetic model): ``decode(source id lists)`` -> greedy target id lists."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self.meta = json.loads((self.folder / "metadata.json").read_text(encoding="utf-8"))
        self.encoder = ort.InferenceSession(str(self.folder / "encoder.onnx"), providers=["CPUExecutionProvider"])
        self.step = ort.InferenceSession(str(self.folder / "decoder_step.onnx"), providers=["CPUExecutionProvider"])
        self.special = self.meta["special_ids"]

    def length_caps(self, sources: list[list[int]]) -> np.ndarray:
        """Most target tokens of each source (metadata ``length_cap``; no ``decode_length``: the longest)."""
        rule = self.meta.get("decode_length") or {"per_source_token": 0, "extra": self.meta["max_target_length"]}
        return np.array([min(self.meta["max_target_length"], math.ceil(rule["per_source_token"] * len(ids))
                             + rule["extra"]) for ids in sources])

    def decode(self, sources: list[list[int]]) -> list[list[int]]:
        """Greedy target ids of each source (up to, not including, [END])."""
        source = np.zeros((len(sources), max(len(ids) for ids in sources)), dtype="int32")
        for row, ids in enumerate(sources):
            source[row, : len(ids)] = ids
        caps = self.length_caps(sources)
        _, cross = self.encoder.run(None, {"source_ids": source})
        layers, heads, key_dim = (self.meta["decoder"][k] for k in ("layers", "heads", "key_dim"))
        cache = np.zeros((len(sources), layers, 2, int(caps.max()), heads, key_dim), dtype="float32")
        token = np.full((len(sources), 1), self.special["start"], dtype="int32")
        generated = np.zeros((len(sources), 0), dtype="int32")
        finished = np.zeros(len(sources), dtype=bool)
        greedy = self.meta["greedy"]
        for index in range(int(caps.max())):
            logits, cache = self.step.run(None, {"token": token, "index": np.array(index, dtype="int32"),
                                                 "self_cache": cache, "cross_cache": cross, "source_ids": source})
            logits[:, greedy["forbidden_ids"]] = -np.inf
            forbid_repeats(logits, generated, greedy["max_repeat"], greedy["repeat_span"])
            chosen = np.where(finished, self.special["pad"], logits.argmax(axis=1)).astype("int32")
            generated = np.concatenate([generated, chosen[:, None]], axis=1)
            finished |= (chosen == self.special["end"]) | (index + 1 >= caps)
            if finished.all():
                break
            token = chosen[:, None]
        return [list(row[: list(row).index(self.special["end"])] if self.special["end"] in row else row)
                for row in generated.tolist()]


class OnnxTranslator(OnnxDecoder):
    """A translator's export: ``translate(texts)`` -> translations (greedy)."""

    def __init__(self, folder: str | Path):
        super().__init__(folder)
        kind = self.meta["vocabulary_kind"]
        self.source = _vocabulary(self.folder / self.meta["source_vocabulary"],
                                  self.meta.get("source_vocabulary_kind", kind), self.meta.get("wordpiece"))
        self.target = _vocabulary(self.folder / self.meta["target_vocabulary"], kind)

    def source_ids(self, text: str, domain: str | None = None) -> list[int]:
        """The ids of ``text`` (metadata ``source_text``), led by the tag of ``domain`` (``tag_rule``)."""
        ids = self.source.encode(" ".join(unicodedata.normalize("NFC", text).split()))
        if domain is not None:
            at = self.meta["tag_position"]
            ids = [*ids[:at], self.meta["tags"][domain]["id"], *ids[at:]]
        longest = self.meta["max_source_length"]
        if isinstance(self.source, _WordPieceSource):  # [CLS] ... [SEP]: a long source keeps its [SEP]
            return ids if len(ids) <= longest else [*ids[: longest - 1], ids[-1]]
        return ids[:longest] or [1]  # 1: [UNK]

    def translate(self, texts: list[str], batch_size: int = 64, domain: str | None = None) -> list[str]:
        """Greedy translations (``domain``: a corpus tag of metadata ``tags``, or None: neutral); sources
        of similar length are decoded together, ``batch_size`` at a time."""
        sources = {i: self.source_ids(text, domain) for i, text in enumerate(texts) if text.strip()}
        order = sorted(sources, key=lambda i: len(sources[i]))
        results = [""] * len(texts)
        for start in range(0, len(order), batch_size):
            rows = order[start:start + batch_size]
            for i, ids in zip(rows, self.decode([sources[i] for i in rows]), strict=True):
                results[i] = self.target.decode([t for t in ids if t > self.special["start"]])
        return results


def forbid_repeats(logits: np.ndarray, generated: np.ndarray, max_repeat: int, span_limit: int) -> None:
    """-inf for the token that would make a span of 1..span_limit tokens repeat more than
    ``max_repeat`` times in a row (metadata.json ``greedy.rule``)."""
    if not max_repeat:
        return
    steps = generated.shape[1]
    for row, sequence in enumerate(generated):
        for span in range(1, span_limit + 1):
            window = (max_repeat + 1) * span - 1
            tail = sequence[steps - window:]
            if steps >= window and (tail[span:] == tail[:-span]).all():
                logits[row, sequence[steps - span]] = -np.inf


class _Words:
    """A whole-word vocabulary (one token per line)."""

    def __init__(self, path: Path):
        self.tokens = path.read_text(encoding="utf-8").splitlines()
        self.ids = {token: i for i, token in enumerate(self.tokens)}

    def encode(self, text: str) -> list[int]:
        return [self.ids.get(word, 1) for word in text.split()]

    def decode(self, ids: list[int]) -> str:
        return " ".join(self.tokens[i] for i in ids if i < len(self.tokens))


class _Pieces:
    """A SentencePiece vocabulary."""

    def __init__(self, path: Path):
        import sentencepiece

        self.model = sentencepiece.SentencePieceProcessor(model_file=str(path))

    def encode(self, text: str) -> list[int]:
        return list(self.model.encode(text))

    def decode(self, ids: list[int]) -> str:
        return self.model.decode(ids)


class _WordPieceSource:
    """A pretrained encoder's WordPiece vocabulary (a source only): ``[CLS]`` + piece ids + ``[SEP]``."""

    def __init__(self, path: Path, rules: dict):
        self.ids = {token: i for i, token in enumerate(path.read_text(encoding="utf-8").splitlines())}
        self.pieces, self.rules = WordPieces(rules, self.ids), rules

    def encode(self, text: str) -> list[int]:
        return [self.rules["cls_id"], *(self.ids[piece] for piece in self.pieces.pieces(text)), self.rules["sep_id"]]


def _vocabulary(path: Path, kind: str, rules: dict | None = None):
    if kind == "wordpiece":
        return _WordPieceSource(path, rules)
    return _Words(path) if kind == "words" else _Pieces(path)


if __name__ == "__main__":
    arguments = sys.argv[2:]
    tag = arguments[1] if arguments[:1] == ["--domain"] else None
    arguments = arguments[2:] if tag is not None else arguments
    if len(sys.argv) < 2 or not arguments:
        sys.exit("usage: python onnx_translate_client.py EXPORT_DIR [--domain TAG] TEXT [TEXT ...]")
    for translation in OnnxTranslator(sys.argv[1]).translate(arguments, domain=tag):
        print(translation)
