"""Using a trained translation model: load and save its folder, translate, score.

Plain functions (no argparse) that a script or a server can call; ``kformer train translate``
(``kformer.commands.translate``) writes the folders they read.

A translate model folder holds ``kformer.json``, ``model.keras`` (a
:class:`~kformer.models.seq2seq.Seq2SeqTransformer`), the SentencePiece vocabularies
(``vocab.spm`` when shared, else ``source.spm`` and ``target.spm``) and ``metrics.json``.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kformer.errors import KformerError

MODEL_FILE = "model.keras"
SHARED_VOCAB_FILE = "vocab.spm"
SOURCE_VOCAB_FILE = "source.spm"
TARGET_VOCAB_FILE = "target.spm"


@dataclass
class Translator:
    """A loaded translate model folder."""

    model: Any  # Seq2SeqTransformer
    source_vocab: Any  # kformer.text.subword.Subwords
    target_vocab: Any
    manifest: dict

    @property
    def max_source_length(self) -> int:
        return int(self.model.max_source_length)

    @property
    def max_target_length(self) -> int:
        return int(self.model.max_target_length)


def load_translator(model_dir: str | Path) -> Translator:
    """Load a folder written by ``kformer train translate`` (safe mode, clear errors)."""
    from kformer.artifacts import load_keras_model, read_manifest
    from kformer.text.subword import Subwords

    model_dir = Path(model_dir)
    manifest = read_manifest(model_dir)
    if manifest["task"] != "translate":
        raise KformerError(f"{model_dir} holds a '{manifest['task']}' model, not a translation model")
    import kformer.metrics  # noqa: F401  registers the loss and metric the model was compiled with
    import kformer.models.seq2seq  # noqa: F401  registers Seq2SeqTransformer
    import kformer.training  # noqa: F401  registers the learning-rate schedule

    vocab = manifest.get("vocab", {})
    source_vocab = Subwords.load(model_dir / vocab.get("source", SOURCE_VOCAB_FILE))
    target_vocab = (
        source_vocab if vocab.get("shared") else Subwords.load(model_dir / vocab.get("target", TARGET_VOCAB_FILE))
    )
    with warnings.catch_warnings():
        # the model is saved with a fresh (unbuilt) optimizer, which Keras reports on loading
        warnings.filterwarnings("ignore", message="Skipping variable loading for optimizer")
        model = load_keras_model(model_dir / manifest.get("model_file", MODEL_FILE))
    return Translator(model, source_vocab, target_vocab, manifest)


def save_translator(translator: Translator, out: str | Path, recipe: dict, metrics: dict,
                    extra_files: dict[str, Any] | None = None) -> Path:
    """Write a model folder atomically: model, vocabularies, ``kformer.json``, ``metrics.json``
    and any ``extra_files`` (name -> JSON data)."""
    from kformer.artifacts import MANIFEST_NAME, save_keras_atomic, staged_folder, write_json_atomic

    shared = translator.source_vocab is translator.target_vocab
    vocab_files = (
        {"shared": True, "source": SHARED_VOCAB_FILE, "target": SHARED_VOCAB_FILE}
        if shared else {"shared": False, "source": SOURCE_VOCAB_FILE, "target": TARGET_VOCAB_FILE}
    )
    manifest = {
        "task": "translate",
        "model_file": MODEL_FILE,
        "vocab": vocab_files,
        "max_source_length": translator.max_source_length,
        "max_target_length": translator.max_target_length,
        "recipe": recipe,
        "metrics": {k: metrics[k] for k in ("test", "valid_loss", "train_seconds", "splits") if k in metrics},
    }
    out = Path(out)
    with staged_folder(out) as stage:
        save_keras_atomic(translator.model, stage / MODEL_FILE)
        translator.source_vocab.save(stage / vocab_files["source"])
        if not shared:
            translator.target_vocab.save(stage / vocab_files["target"])
        write_json_atomic(stage / "metrics.json", metrics)
        for name, data in (extra_files or {}).items():
            write_json_atomic(stage / name, data)
        write_json_atomic(stage / MANIFEST_NAME, manifest)
    return out


def encode_sources(translator: Translator, texts: list[str]) -> list[list[int]]:
    """NFC-normalised subword ids of each text, cut to the model's longest source."""
    from kformer.data.pairs import normalize_text
    from kformer.text.specials import UNK_ID

    ids = translator.source_vocab.encode([normalize_text(t) for t in texts])
    return [seq[: translator.max_source_length] or [UNK_ID] for seq in ids]


def translate_texts(translator: Translator, texts: list[str], beam: int = 1, batch_size: int = 64) -> list[str]:
    """Translate each text (greedy when ``beam`` is 1, else beam search); blank texts give ''.

    Texts are decoded in batches of similar length so little time goes to padding.
    """
    import numpy as np

    from kformer.data.pairs import length_bucketed_batches, pad_batch
    from kformer.models.generation import beam_search, greedy_decode

    if beam < 1:
        raise KformerError(f"--beam must be at least 1, not {beam}")
    if batch_size < 1:
        raise KformerError(f"--batch-size must be at least 1, not {batch_size}")
    results = [""] * len(texts)
    todo = [i for i, t in enumerate(texts) if t.strip()]
    if not todo:
        return results
    sources = encode_sources(translator, [texts[i] for i in todo])
    for batch in length_bucketed_batches([len(s) for s in sources], batch_size):
        ids = pad_batch([sources[i] for i in batch], limit=translator.max_source_length)
        # a translation rarely needs more than twice the source's subwords
        max_length = int(min(translator.max_target_length, 2 * ids.shape[1] + 8))
        if beam == 1:
            generated = greedy_decode(translator.model, ids, max_length)
        else:
            generated = beam_search(translator.model, ids, max_length, beam_width=beam)
        for row, text in zip(batch, translator.target_vocab.decode(np.asarray(generated)), strict=True):
            results[todo[row]] = text
    return results


def score_pairs(translator: Translator, pairs, beam: int = 1, batch_size: int = 64) -> tuple[dict, list[str]]:
    """BLEU, chrF, exact match (and ``n``) of the translations of ``pairs``; also the translations."""
    from kformer.metrics import translation_scores

    start = time.monotonic()
    hypotheses = translate_texts(translator, [p.source for p in pairs], beam=beam, batch_size=batch_size)
    scores = translation_scores(hypotheses, [p.target for p in pairs])
    scores.update(beam=beam, decode_seconds=round(time.monotonic() - start, 2))
    return scores, hypotheses
