"""A loaded translator, and the translation model folder: the one place that writes and reads it.

The folder: ``kformer.json`` (task ``translate``, the vocabulary files, the longest source and
target, the output cap, recipe, a metrics summary), ``model.keras``, ``vocab.spm`` (or
``source.spm`` and ``target.spm``; ``words.txt`` or ``source_words.txt`` and
``target_words.txt`` for whole words; with a pretrained encoder ``source_wordpiece.txt``, its
WordPiece vocabulary read as ``kformer.json["vocab"]``'s ``lowercase`` and ``strip_accents`` say
(a folder without ``strip_accents``, from before it was recorded, keeps accents), and in
``kformer.json`` an ``encoder`` entry -- its weights are in ``model.keras``), ``metrics.json``, ``test_translations.json`` and
``training/`` (checkpoint, logs, and what ``resume`` needs to rebuild the same model:
``state.json`` and the vocabularies, written by :func:`save_vocabs`); with retrieval (kNN-MT),
``retrieval/`` and ``kformer.json["retrieval"]`` (:mod:`.retrieval`). ``kformer.json["corpora"]``
lists the training corpora (name, training pairs, weight, tag) and, with corpus tags,
``kformer.json["tags"]`` maps each tag to its source token and id (:mod:`.domains`).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kformer.data.pairs import Pair
from kformer.errors import BadInput, CorruptModel, KformerError
from kformer.folders import MODEL_FILE, TRAINING_DIR, read_manifest, write_model_folder
from kformer.tasks.base import AttentionMaps, TaskModel, check_texts, write_curves
from kformer.tasks.translate.auto import DEFAULT_DECODE_LENGTH
from kformer.tasks.translate.domains import domain_ids, domain_names, tagged
from kformer.tasks.translate.pairs import PairData, read_pair_data
from kformer.tasks.translate.retrieval import (
    Datastore,
    add_to_folder,
    read_datastore,
    write_datastore,
)
from kformer.tasks.translate.settings import TASK, at_least

SHARED_VOCAB_FILE = "vocab.spm"
SOURCE_VOCAB_FILE = "source.spm"
TARGET_VOCAB_FILE = "target.spm"
WORD_VOCAB_FILES = {"shared": "words.txt", "source": "source_words.txt", "target": "target_words.txt"}
WORDPIECE_VOCAB_FILE = "source_wordpiece.txt"  # a pretrained encoder's own vocabulary, one piece a line
TEST_TRANSLATIONS_FILE = "test_translations.json"
# Decoding never puts more than this many copies of a word or a span of subwords back to back
# (``max_repeat``; 0 turns the limit off): real sentences do not, looping models do.
MAX_REPEAT = 3


def check_decoding(beam: int, batch_size: int, max_repeat: int = MAX_REPEAT) -> None:
    """Reject a ``beam`` or ``batch_size`` below 1 or a ``max_repeat`` below 0 (before a model is
    loaded or run); the error's field is the name."""
    for name, value, least in (("beam", beam, 1), ("batch_size", batch_size, 1), ("max_repeat", max_repeat, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise BadInput(f"{{field}} must be at least {least}, not {value!r}", field=name)


# --- the folder ------------------------------------------------------------------------------------


def _vocab_files(source_vocab, target_vocab) -> dict[str, Any]:
    """The manifest's ``vocab`` entry: which files hold the vocabularies (``kind``: the target's;
    ``source_kind`` ``"wordpiece"`` for a pretrained encoder's)."""
    shared, words = source_vocab is target_vocab, _is_words(target_vocab)
    if is_wordpiece(source_vocab):
        target = WORD_VOCAB_FILES["target"] if words else TARGET_VOCAB_FILE
        return {"shared": False, "source_kind": "wordpiece", "lowercase": source_vocab.lowercase,
                "strip_accents": source_vocab.strip_accents, "source": WORDPIECE_VOCAB_FILE, "target": target, **({"kind": "words"} if words else {})}
    if words:
        names = WORD_VOCAB_FILES
        return {"shared": shared, "kind": "words", "source": names["shared" if shared else "source"],
                "target": names["shared" if shared else "target"]}
    if shared:
        return {"shared": True, "source": SHARED_VOCAB_FILE, "target": SHARED_VOCAB_FILE}
    return {"shared": False, "source": SOURCE_VOCAB_FILE, "target": TARGET_VOCAB_FILE}


def is_wordpiece(vocab) -> bool:
    from kformer.text.wordpiece import WordPieceVocabulary

    return isinstance(vocab, WordPieceVocabulary)


def _is_words(vocab) -> bool:
    from kformer.text.word_vocab import WordVocabulary

    return isinstance(vocab, WordVocabulary)


def save_vocabs(folder: Path, source_vocab, target_vocab) -> dict[str, Any]:
    """Write the vocabularies into ``folder`` (the same object when shared: one file); returns
    their manifest entry, what :func:`load_vocabs` reads back."""
    files = _vocab_files(source_vocab, target_vocab)
    source_vocab.save(folder / files["source"])
    if not files["shared"]:
        target_vocab.save(folder / files["target"])
    return files


def load_vocabs(folder: Path, files: dict[str, Any]):
    """``(source, target)`` vocabularies named by a manifest entry (the same object when shared)."""
    from kformer.text.subword import Subwords
    from kformer.text.word_vocab import WordVocabulary

    kind = WordVocabulary if files.get("kind") == "words" else Subwords

    def read(name: str):
        try:
            return kind.load(folder / name)
        except KformerError as exc:
            raise CorruptModel(exc.message_for(), field="model_dir") from None

    if files.get("source_kind") == "wordpiece":
        from kformer.text.wordpiece import WordPieceVocabulary

        try:
            # folders written before strip_accents was recorded read their source as they did: accents kept
            source = WordPieceVocabulary.load(folder / files["source"], bool(files.get("lowercase", True)),
                                              bool(files.get("strip_accents", False)))
        except KformerError as exc:
            raise CorruptModel(exc.message_for(), field="model_dir") from None
        return source, read(files.get("target", TARGET_VOCAB_FILE))
    source = read(files.get("source", SOURCE_VOCAB_FILE))
    return source, source if files.get("shared") else read(files.get("target", TARGET_VOCAB_FILE))


def save(translator: Translator, out: str | os.PathLike, recipe: dict, metrics: dict,
         extra_files: dict[str, Any] | None = None) -> Path:
    """Write ``translator`` as a model folder, atomically: model, vocabularies, ``kformer.json``,
    ``metrics.json``, its retrieval datastore if it has one, and any ``extra_files`` (name -> JSON data)."""
    from kformer.artifacts import write_json_atomic

    manifest = {
        "vocab": _vocab_files(translator.source_vocab, translator.target_vocab),
        **{key: translator.manifest[key] for key in ("encoder", "corpora", "tags") if key in translator.manifest},
        "max_source_length": translator.max_source_length,
        "max_target_length": translator.max_target_length,
        "decode_length": translator.decode_length,
        "recipe": recipe,
        "metrics": {k: metrics[k] for k in ("test", "valid_loss", "train_seconds", "splits") if k in metrics},
    }
    if translator.retrieval is not None:
        manifest["retrieval"] = translator.retrieval.manifest_entry()

    def write_files(stage: Path) -> None:
        save_vocabs(stage, translator.source_vocab, translator.target_vocab)
        if translator.retrieval is not None:
            write_datastore(stage, translator.retrieval)
        for name, data in (extra_files or {}).items():
            write_json_atomic(stage / name, data)
        write_curves(Path(out) / TRAINING_DIR, stage)

    return write_model_folder(out, TASK, translator.model, manifest, metrics, write_files=write_files)


def load(folder: str | os.PathLike) -> Translator:
    """Open a translation model folder (safe mode; a clear error if it is not one). Folders
    written before model folders had a ``format_version`` load too."""
    import kformer.models.seq2seq  # noqa: F401  registers Seq2SeqTransformer for loading
    from kformer.folders import load_keras_model

    folder = Path(folder)
    manifest = read_manifest(folder, task=TASK)
    if "encoder" in manifest:
        import kformer.models.pretrained_seq2seq  # noqa: F401  registers the pretrained-encoder translator
    source_vocab, target_vocab = load_vocabs(folder, manifest.get("vocab", {}))
    model = load_keras_model(folder / manifest.get("model_file", MODEL_FILE))
    retrieval = read_datastore(folder, manifest["retrieval"]) if manifest.get("retrieval") else None
    return Translator(model, source_vocab, target_vocab, folder, manifest, retrieval=retrieval)


def translation_rows(pairs: Sequence[Pair], translations: Sequence[str]) -> list[dict]:
    """``{"source", "reference", "translation"}`` per pair: the rows of ``test_translations.json``
    and of an evaluation's ``translations.json``."""
    return [{"source": p.source, "reference": p.target, "translation": t}
            for p, t in zip(pairs, translations, strict=True)]


# --- using a trained model ------------------------------------------------------------------------


class Translator(TaskModel):
    """A translation model with its source and target vocabularies (the same object when shared)
    and, when it has one, its retrieval datastore (kNN-MT, :mod:`.retrieval`), which decoding uses
    unless a call passes ``retrieval=False``."""

    task = TASK
    parameters = {"beam": 1, "max_repeat": MAX_REPEAT, "domain": None}

    def __init__(self, model, source_vocab, target_vocab, folder: str | os.PathLike, manifest: dict | None = None,
                 retrieval: Datastore | None = None):
        super().__init__(Path(folder), manifest or {})
        self.model, self.source_vocab, self.target_vocab = model, source_vocab, target_vocab
        self.retrieval = retrieval

    def with_retrieval(self, datastore: Datastore | None) -> Translator:
        """The same network and vocabularies decoding with ``datastore`` (None: without retrieval);
        nothing is written (:meth:`build_retrieval` writes the folder)."""
        return Translator(self.model, self.source_vocab, self.target_vocab, self.folder, self.manifest,
                          retrieval=datastore)

    def build_retrieval(self, data: PairData, *, valid: PairData | None = None, limit: int = 150,
                        lam: float | None = None, temperature: float | None = None, k: int | None = None,
                        search: str = "auto", nprobe: int | None = None, write: bool = True,
                        progress=None) -> Translator:
        """A datastore over the training pairs ``data`` (a path or pairs) and the translator that
        decodes with it -- written into this model folder unless ``write`` is False. Its weights
        are chosen by greedy chrF on the first ``limit`` pairs of ``valid`` (validation pairs; never
        the test pairs), or, with ``lam`` given, set (``temperature`` default: the datastore's
        typical distance; ``k`` default 8) without tuning. ``search`` (``"auto"``, ``"exact"``
        or ``"ivf"``) and ``nprobe``: how decoding finds the neighbours (:func:`.retrieval.with_search`).
        With corpus tags, each source is keyed with its corpus's tag, as training saw it
        (:meth:`corpus_domains`)."""
        from kformer.tasks.translate.pairs import read_training_data
        from kformer.tasks.translate.retrieval import check_search_request, datastore_for

        at_least("limit", limit, 1)
        check_search_request(search, nprobe)
        pairs = read_training_data(data, "data")[0]
        valid_pairs = read_pair_data(valid, "valid") if lam is None else []
        if lam is None and (temperature is not None or k is not None):
            raise BadInput("{field} must be given with temperature or k (they skip tuning)", field="lam")
        store = datastore_for(self, *self.encode_pairs(pairs), valid_pairs, limit, progress, lam=lam,
                              temperature=temperature, k=k, search=search, nprobe=nprobe)
        if write:
            add_to_folder(self.folder, store)
            return load(self.folder)
        return self.with_retrieval(store)

    def corpus_domains(self, pairs: Sequence[Pair]) -> list[str | None]:
        """The tag of each pair's corpus, as this model's training recorded it (None: untagged)."""
        if not self.manifest.get("tags"):
            return [None] * len(pairs)
        tags = {row.get("name"): row.get("tag") for row in self.manifest.get("corpora") or []}
        return [tags.get(pair.corpus) for pair in pairs]

    def encode_pairs(self, pairs: Sequence[Pair]) -> tuple[list[list[int]], list[list[int]]]:
        """``(sources, targets)`` subword ids of ``pairs`` as training encoded them (sources
        tagged with their corpus, :meth:`corpus_domains`; targets NFC-normalised)."""
        from kformer.data.pairs import normalize_text

        return (self.encode_sources([p.source for p in pairs], self.corpus_domains(pairs)),
                self.target_vocab.encode([normalize_text(p.target) for p in pairs]))

    def _knn(self, retrieval: bool):
        """``(knn tensors, k)`` for decoding (``(None, 0)``: without retrieval)."""
        if not retrieval or self.retrieval is None:
            return None, 0
        return self.retrieval.knn(), self.retrieval.k

    @property
    def max_source_length(self) -> int:
        return int(self.model.max_source_length)

    @property
    def max_target_length(self) -> int:
        return int(self.model.max_target_length)

    @property
    def decode_length(self) -> dict[str, float]:
        """The output cap per sentence, ``{"per_source_token": a, "extra": b}``: a translation of a
        source of ``n`` subwords gets at most ``ceil(a * n) + b`` target tokens (``[END]``
        included), ``a`` measured on the training pairs (:func:`~kformer.tasks.translate.auto.
        decode_length_rule`); folders written before the rule get ``a = 2, b = 8``."""
        return self.manifest.get("decode_length") or dict(DEFAULT_DECODE_LENGTH)

    def decode_limits(self, source_lengths: Sequence[int]) -> list[int]:
        """Most target tokens for sources of these subword lengths (:attr:`decode_length`, at
        most the model's longest target)."""
        rule = self.decode_length
        return [int(min(self.max_target_length, math.ceil(rule["per_source_token"] * n) + rule["extra"]))
                for n in source_lengths]

    def metadata(self) -> dict[str, Any]:
        retrieval = {} if self.retrieval is None else {"retrieval": {
            "entries": self.retrieval.entries, "k": self.retrieval.k, "temperature": self.retrieval.temperature,
            "lambda": self.retrieval.lam, "search": self.retrieval.search, "nprobe": self.retrieval.nprobe}}
        return {**super().metadata(), "shared_vocab": self.source_vocab is self.target_vocab,
                **({"encoder": self.manifest["encoder"]} if "encoder" in self.manifest else {}),
                "domains": sorted(self.manifest.get("tags") or {}),
                "max_source_length": self.max_source_length, "max_target_length": self.max_target_length, **retrieval}

    def encode_sources(self, texts: Sequence[str], domain: str | Sequence[str | None] | None = None) -> list[list[int]]:
        """NFC-normalised subword ids of each text, led by the tag of ``domain`` (one for all
        texts or one each; :func:`.domains.domain_ids`), cut to the model's longest source."""
        from kformer.data.pairs import normalize_text
        from kformer.text.specials import UNK_ID

        ids = tagged(self.source_vocab, self.source_vocab.encode([normalize_text(t) for t in texts]),
                     domain_ids(self.manifest, domain, len(texts)))
        if is_wordpiece(self.source_vocab):  # [CLS] ... [SEP]: a long source keeps its [SEP]
            longest = self.max_source_length
            return [seq if len(seq) <= longest else [*seq[: longest - 1], seq[-1]] for seq in ids]
        return [seq[: self.max_source_length] or [UNK_ID] for seq in ids]

    def _decode(self, sources: list[list[int]], beam: int, batch_size: int, max_repeat: int,
                retrieval: bool = True) -> list[str]:
        """Translations of subword-id sources, in their order. Batches hold similar lengths, so
        little time goes to padding; each is ``(batch, width)`` with ``width`` a bucket."""
        import numpy as np

        from kformer.data.batching import length_bucketed_batches, pad_batch
        from kformer.models.generation import beam_search, greedy_decode

        results = [""] * len(sources)
        knn, knn_k = self._knn(retrieval)
        for batch in length_bucketed_batches([len(s) for s in sources], batch_size):
            ids = pad_batch([sources[i] for i in batch], limit=self.max_source_length)
            max_length = self._decode_length(ids)
            limits = self.decode_limits([len(sources[i]) for i in batch])
            if beam == 1:
                generated = greedy_decode(self.model, ids, max_length, row_limits=limits, max_repeat=max_repeat,
                                          **({"knn": knn, "knn_k": knn_k} if knn is not None else {}))
            else:
                generated = beam_search(self.model, ids, max_length, beam_width=beam, row_limits=limits,
                                        max_repeat=max_repeat, **({"knn": knn, "knn_k": knn_k} if knn is not None else {}))
            for row, text in zip(batch, self.target_vocab.decode(np.asarray(generated)), strict=True):
                results[row] = text
        return results

    def _decode_length(self, ids) -> int:
        """Most tokens to generate for a batch of sources ``ids (batch, width)`` (each row is
        capped further by :meth:`decode_limits`): a translation rarely needs more than twice the
        source's subwords. Computed from the decode width the source is padded to, so
        :meth:`warmup` meets every generation buffer a request can use."""
        from kformer.models.generation import decode_widths

        widths = decode_widths(self.max_source_length)
        width = next((w for w in widths if w >= ids.shape[1]), ids.shape[1])
        return int(min(self.max_target_length, 2 * width + 8))

    def translate(self, texts: Sequence[str], *, beam: int = 1, batch_size: int = 64,
                  max_repeat: int = MAX_REPEAT, retrieval: bool = True,
                  domain: str | Sequence[str | None] | None = None) -> list[str]:
        """Translate each text (greedy when ``beam`` is 1, else beam search); blank texts give ''.
        No word or span of up to 8 subwords appears more than ``max_repeat`` times in a row in a
        translation (0: no limit; see :data:`MAX_REPEAT`). ``retrieval=False`` decodes without the
        folder's kNN-MT datastore (no effect without one). ``domain``: a tag of a model trained
        with corpus tags (``metadata()["domains"]``), or one per text; None: neutral."""
        texts = check_texts(texts)
        check_decoding(beam, batch_size, max_repeat)
        domains = domain_names(self.manifest, domain, len(texts))  # an unknown domain fails before decoding
        results = [""] * len(texts)
        todo = [i for i, text in enumerate(texts) if text.strip()]
        if todo:
            sources = self.encode_sources([texts[i] for i in todo], [domains[i] for i in todo])
            decoded = self._decode(sources, beam, batch_size, max_repeat, retrieval)
            for i, text in zip(todo, decoded, strict=True):
                results[i] = text
        return results

    def score(self, pairs: Sequence[Pair], *, beam: int = 1, batch_size: int = 64,
              max_repeat: int = MAX_REPEAT, retrieval: bool = True,
              domain: str | Sequence[str | None] | None = None) -> tuple[dict, list[str]]:
        """BLEU, chrF, exact match, ``repetition`` (share of translations in which a word or a
        target subword repeats more than 3 times in a row), ``n``, ``beam``, ``max_repeat`` and
        ``decode_seconds`` of the translations of ``pairs`` (decoded as :meth:`translate`), and
        ``retrieval`` (whether the datastore was used); also the translations. ``domain`` as
        :meth:`translate`'s (training scores each held-out pair with its corpus's tag)."""
        start = time.monotonic()
        hypotheses = self.translate([p.source for p in pairs], beam=beam, batch_size=batch_size, max_repeat=max_repeat,
                                    retrieval=retrieval, domain=domain)
        return self.scores_of(pairs, hypotheses, beam=beam, max_repeat=max_repeat, retrieval=retrieval,
                              seconds=time.monotonic() - start), hypotheses

    def scores_of(self, pairs: Sequence[Pair], hypotheses: Sequence[str], *, beam: int, max_repeat: int,
                  retrieval: bool, seconds: float) -> dict:
        """What :meth:`score` reports of ``hypotheses``, the translations of ``pairs`` decoded so."""
        from kformer.metrics import repetition_share, translation_scores

        scores = translation_scores(hypotheses, [p.target for p in pairs])
        scores["repetition"] = repetition_share(hypotheses, self.target_vocab.encode(list(hypotheses)))
        scores.update(beam=beam, max_repeat=max_repeat, decode_seconds=round(seconds, 2),
                      retrieval=bool(retrieval and self.retrieval is not None))
        return scores

    def evaluate(self, data: PairData, *, beam: int = 1, batch_size: int = 64, out: str | os.PathLike | None = None,
                 limit: int | None = None, max_repeat: int = MAX_REPEAT, retrieval: bool = True,
                 domain: str | None = None) -> dict:
        """Scores (as :meth:`score`) of the translations of ``data`` (a pairs file or pairs in
        memory; the first ``limit`` only, when given). With ``out``, also writes
        ``out/scores.json`` and ``out/translations.json`` (source, reference, translation).
        ``domain``: every source translated with that tag (:meth:`translate`)."""
        from kformer.artifacts import staged_folder, write_json_atomic

        check_decoding(beam, batch_size, max_repeat)
        pairs = read_pair_data(data, "data")
        if limit is not None:
            at_least("limit", limit, 1)
            pairs = pairs[:limit]
        scores, hypotheses = self.score(pairs, beam=beam, batch_size=batch_size, max_repeat=max_repeat,
                                        retrieval=retrieval, domain=domain)
        if out is not None:
            with staged_folder(Path(out)) as stage:
                write_json_atomic(stage / "scores.json", scores)
                write_json_atomic(stage / "translations.json", translation_rows(pairs, hypotheses))
        return scores

    def predict(self, instances: Sequence[str], *, beam: int = 1, max_repeat: int = MAX_REPEAT,
                batch_size: int = 64, retrieval: bool = True, domain: str | None = None) -> list[dict[str, Any]]:
        """``{"translation": ...}`` per input sentence: :meth:`translate`'s answers as dicts."""
        return [{"translation": text} for text in self.translate(instances, beam=beam, batch_size=batch_size,
                                                                 max_repeat=max_repeat, retrieval=retrieval, domain=domain)]

    def check_values(self, parameters: dict[str, Any]) -> None:
        check_decoding(parameters["beam"], 1, parameters["max_repeat"])
        if parameters["domain"] is not None and not isinstance(parameters["domain"], str):
            raise BadInput(f"{{field}} must be a tag (a string), not {parameters['domain']!r}", field="domain")
        domain_names(self.manifest, parameters["domain"], 1)

    def attention_maps(self, text: str) -> AttentionMaps:
        """Translate ``text`` greedily; encoder, decoder-self and cross attention of every layer and
        head, ``(layers, heads, queries, keys)``, labelled with subword pieces."""
        import numpy as np

        from kformer.data.batching import pad_batch
        from kformer.models.generation import greedy_decode, strip_special
        from kformer.text.specials import START, START_ID

        if not isinstance(text, str) or not text.strip():
            raise BadInput("{field} must be a non-empty sentence", field="text")
        source = self.encode_sources([text])
        padded = pad_batch(source, limit=self.max_source_length)  # decoded exactly as translate() does
        generated = greedy_decode(self.model, padded, self._decode_length(padded),
                                  row_limits=self.decode_limits([len(source[0])]), max_repeat=MAX_REPEAT)[0]
        # the decoder reads [START] + output: a translation that never ended is cut to fit
        output = strip_special(generated)[: self.max_target_length - 1]
        source = np.array(source, dtype="int32")
        target_in = np.array([[START_ID, *output]], dtype="int32")
        maps = {name: stack[0] for name, stack in self.model.attention_maps(source, target_in).items()}
        source_pieces = self.source_vocab.pieces(source[0])
        target_pieces = [START, *self.target_vocab.pieces(output)]
        return AttentionMaps(
            maps=maps,
            rows={"encoder": source_pieces, "decoder_self": target_pieces, "cross": target_pieces},
            cols={"encoder": source_pieces, "decoder_self": target_pieces, "cross": source_pieces},
            output=self.target_vocab.decode([generated])[0],
        )

    def export_plan(self):
        """The encoder (a pretrained one included), one cached decoder step and greedy decoding, with
        the vocabulary files and how a client prepares a source (:func:`.exported.export_plan`)."""
        from kformer.tasks.translate.exported import export_plan

        return export_plan(self)

    def warmup(self, beams: Sequence[int] = (1,)) -> None:
        """Decode once per decode shape (batch and width bucket) and beam width in ``beams``
        (1 = greedy, what a request gets by default), with the default repeat limit, so no request
        decoding that way waits for a compile. ``warmup(beams=(1, 4))`` also readies beam 4 (each
        beam width compiles its own loop: seconds per shape)."""
        import numpy as np

        from kformer.models.generation import beam_search, decode_shapes, greedy_decode
        from kformer.text.specials import END_ID

        for beam in beams:
            check_decoding(beam, 1)
        knn = {} if self.retrieval is None else dict(zip(("knn", "knn_k"), self._knn(True), strict=True))
        for beam in dict.fromkeys(beams):
            for batch, width in decode_shapes(self.model):
                ids = np.full((batch, width), END_ID + 1, dtype="int32")  # any ordinary piece
                if beam == 1:
                    greedy_decode(self.model, ids, self._decode_length(ids), max_repeat=MAX_REPEAT, **knn)
                else:
                    beam_search(self.model, ids, self._decode_length(ids), beam_width=beam, max_repeat=MAX_REPEAT,
                                **knn)

