"""A translator's export: what ``kformer export`` writes of it (:func:`export_plan`), and the
export folder (``kformer export``'s ``--out``) loaded as a translator, so ``kformer serve`` and
``kformer.load`` take an export as they take a model folder.

:func:`export_plan`: the seq2seq endpoints (:mod:`kformer.models.seq2seq_export`) over the
translator's network -- with a pretrained encoder, ``encode`` runs the BERT backbone (its padding
mask and segment ids made from the WordPiece ids in the graph) and the bridge to the decoder's
width -- beside the vocabulary files, and in ``metadata.json`` how a client turns a text into
``source_ids`` (``source_text``; a WordPiece source's rules under ``wordpiece``; a corpus tag's id
at ``tag_position``) and ids back into text. A kNN-MT datastore goes inside the decoder's graphs
(:func:`~kformer.models.retrieval.held_in_weights`): the export searches it as the folder does.

:class:`ExportedTranslator` is a :class:`~kformer.tasks.translate.Translator` whose decoding is
the export's (:class:`~kformer.models.exported_decoding.ExportedDecoder`: ONNX Runtime with the
cached decoder step, or the SavedModel's greedy signature) and whose vocabularies are the export's
files: the same sources, length caps and answers; greedy only (an export has no beam search), and
no attention maps (they need the Keras network: serve the model folder).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kformer.tasks.base import FromExport
from kformer.tasks.translate.model import (
    MAX_REPEAT,
    SOURCE_VOCAB_FILE,
    TARGET_VOCAB_FILE,
    Translator,
    is_wordpiece,
    load_vocabs,
)
from kformer.tasks.translate.settings import TASK

CUT = "no [START]/[END], the first {longest}; no ids: one [UNK]"
WORDPIECE_CUT = "[CLS] + their ids + [SEP]; over {longest} ids: the first {first} and [SEP]"
RETRIEVAL_RULE = ("inside the graphs: each step's decoder state queries the datastore's keys (squared L2; search ivf: "
                  "among the entries of its nprobe nearest lists); p_knn(y) sums softmax(-distance / temperature) "
                  "over the k nearest keys whose value is y; decode_step's logits are log(lambda * p_knn + "
                  "(1 - lambda) * softmax(model logits)), chosen from as logits are")


def export_plan(translator: Translator):
    """The :class:`~kformer.models.export_plan.Plan` of ``translator`` (a loaded model folder):
    ``encode``, ``decode_step`` and greedy ``serving_default``, each greedy row capped by its
    ``decode_length``, with the default repeat limit, and the folder's datastore searched at every
    step when it has one (``metadata.json["retrieval"]``)."""
    import shutil

    from kformer.models.export_plan import Plan
    from kformer.models.retrieval import held_in_weights
    from kformer.models.seq2seq_export import seq2seq_endpoints, seq2seq_info

    manifest, vocab = translator.manifest, translator.manifest.get("vocab") or {}
    files = list(dict.fromkeys([vocab.get("source", SOURCE_VOCAB_FILE), vocab.get("target", TARGET_VOCAB_FILE)]))

    def write_files(folder: Path) -> None:
        for name in files:
            shutil.copyfile(translator.folder / name, folder / name)

    source, notes = _source_rules(translator)
    info = {"vocabulary_files": files, **seq2seq_info(translator.model, MAX_REPEAT),
            "source_vocabulary": files[0], "target_vocabulary": files[-1], "decode_length": translator.decode_length,
            **source, **({"encoder": manifest["encoder"]} if "encoder" in manifest else {}),
            "vocabulary_kind": "words" if vocab.get("kind") == "words" else "sentencepiece",
            "target_text": "the ids before [END], without ids 0-2, detokenised (words: joined by spaces)",
            "length_cap": "a source of n ids gets at most min(max_target_length, ceil(per_source_token * n) + "
                          "extra) target tokens ([END] included; decode_length)"}
    knn, tracked = None, [translator.model]
    if translator.retrieval is not None:
        knn, weights = held_in_weights(translator.retrieval.knn())
        tracked.append(weights)
        info["retrieval"] = {**translator.metadata()["retrieval"], "rule": RETRIEVAL_RULE}
    endpoints = seq2seq_endpoints(translator.model, translator.decode_length, MAX_REPEAT, notes, knn,
                                  0 if knn is None else translator.retrieval.k)
    return Plan(TASK, endpoints, tracked, write_files, info)


def _source_rules(translator: Translator) -> tuple[dict[str, Any], dict[str, str]]:
    """``(metadata keys, notes)``: how a client turns a text into ``source_ids`` -- the text
    normalised, its ids (``vocabulary_kind``'s, or with a pretrained encoder the WordPiece rules
    of ``source_vocabulary_kind`` ``wordpiece``), a corpus tag's id, the cut -- and what the
    encoder signature's tensors are (:func:`~kformer.models.seq2seq_export.seq2seq_endpoints`)."""
    from kformer.tasks.translate.domains import tag_position
    from kformer.text.wordpiece import WORDPIECE_STEP, export_rules

    longest = translator.max_source_length
    text = "NFC-normalised, runs of whitespace -> one space, stripped; then its ids ("
    tags = translator.manifest.get("tags")
    if tags:
        tags = {"tags": tags, "tag_position": tag_position(translator.source_vocab),
                "tag_rule": "to translate as one corpus (its tag: a key of tags, a domain), insert tags[tag]['id'] "
                            "at index tag_position of the ids before the cut; no tag: neutral"}
    if not is_wordpiece(translator.source_vocab):
        words = "words: each space-separated word's line in the file, unknown words [UNK]"
        return {"source_text": f"{text}sentencepiece: the model's pieces; {words}), {CUT.format(longest=longest)}",
                **(tags or {})}, {}
    vocab = translator.source_vocab
    rules = {**export_rules(vocab.tokenizer), "cls_id": vocab.cls_id, "sep_id": vocab.sep_id}
    cut = WORDPIECE_CUT.format(longest=longest, first=longest - 1)
    notes = {"source_ids": "the WordPiece ids of source_vocabulary, [CLS] first and [SEP] last; the padding mask "
                           "(ids != 0) and segment ids (all 0) the BERT backbone takes are made from them in the graph",
             "encoder_outputs": f"the pretrained {translator.manifest['encoder'].get('kind', 'bert')} backbone's "
                                "sequence output" + (", through a Dense bridge to the decoder's width"
                                                     if translator.model.bridge is not None else "")}
    return {"source_text": f"{text}the wordpiece rules below: {WORDPIECE_STEP}), {cut}",
            "source_vocabulary_kind": "wordpiece", "wordpiece": rules, **(tags or {})}, notes


class ExportedTranslator(FromExport, Translator):
    """A translator answering from an export folder (see the module)."""

    def __init__(self, folder: Path, metadata: dict):
        from kformer.models.exported_decoding import ExportedDecoder

        files = {"shared": metadata["source_vocabulary"] == metadata["target_vocabulary"],
                 "kind": metadata.get("vocabulary_kind"), "source": metadata["source_vocabulary"],
                 "target": metadata["target_vocabulary"]}
        if metadata.get("source_vocabulary_kind") == "wordpiece":
            rules = metadata["wordpiece"]
            files.update(source_kind="wordpiece", lowercase=rules["lowercase"],
                         strip_accents=rules.get("strip_accents", False))
        source_vocab, target_vocab = load_vocabs(Path(folder), files)
        super().__init__(None, source_vocab, target_vocab, folder, metadata)
        self.decoder = ExportedDecoder(folder, metadata)

    @property
    def max_source_length(self) -> int:
        return int(self.manifest["max_source_length"])

    @property
    def max_target_length(self) -> int:
        return int(self.manifest["max_target_length"])

    def metadata(self) -> dict[str, Any]:
        retrieval = self.manifest.get("retrieval")
        return {**super().metadata(), "export": self.manifest["format"],
                **({"retrieval": {key: value for key, value in retrieval.items() if key != "rule"}} if retrieval else {})}

    def _decode(self, sources: list[list[int]], beam: int, batch_size: int, max_repeat: int,
                retrieval: bool = True) -> list[str]:
        """As :meth:`Translator._decode`; an export with a datastore in its graphs always decodes
        with it (``retrieval=False``: Unsupported)."""
        from kformer.data.batching import length_bucketed_batches
        from kformer.errors import Unsupported

        self.greedy_only(beam)
        if not retrieval and self.manifest.get("retrieval"):
            raise Unsupported(f"{self.folder} carries its retrieval datastore inside its graphs and always decodes with "
                              "it; to decode without it, export the folder after kformer retrieval remove",
                              field="retrieval")
        results = [""] * len(sources)
        for batch in length_bucketed_batches([len(s) for s in sources], batch_size):
            rows = [sources[i] for i in batch]
            generated = self.decoder.decode(rows, self.decode_limits([len(s) for s in rows]), max_repeat)
            for row, text in zip(batch, self.target_vocab.decode(generated), strict=True):
                results[row] = text
        return results

    def warmup(self, beams: Sequence[int] = (1,)) -> None:
        self.translate(["warm up"])


def load_export(folder: str | Path, metadata: dict) -> ExportedTranslator:
    """The translator of an export folder (``metadata``: its metadata.json)."""
    return ExportedTranslator(Path(folder), metadata)
