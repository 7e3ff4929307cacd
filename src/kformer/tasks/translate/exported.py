"""A translator's export folder (``kformer export``'s ``--out``) loaded as a translator, so
``kformer serve`` and ``kformer.load`` take an export as they take a model folder.

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
from kformer.tasks.translate.model import Translator, load_vocabs


class ExportedTranslator(FromExport, Translator):
    """A translator answering from an export folder (see the module)."""

    def __init__(self, folder: Path, metadata: dict):
        from kformer.models.exported_decoding import ExportedDecoder

        files = {"shared": metadata["source_vocabulary"] == metadata["target_vocabulary"],
                 "kind": metadata.get("vocabulary_kind"), "source": metadata["source_vocabulary"],
                 "target": metadata["target_vocabulary"]}
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
        return {**super().metadata(), "export": self.manifest["format"]}

    def _decode(self, sources: list[list[int]], beam: int, batch_size: int, max_repeat: int,
                retrieval: bool = True) -> list[str]:
        """As :meth:`Translator._decode`; an export never carries a datastore (``kformer export``
        refuses a folder with one), so ``retrieval`` changes nothing."""
        from kformer.data.batching import length_bucketed_batches

        self.greedy_only(beam)
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
