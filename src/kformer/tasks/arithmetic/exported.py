"""An arithmetic model's export folder loaded as an arithmetic model (``kformer serve`` and
``kformer.load`` take an export as they take a model folder): :class:`ExportedArithmetic` solves
with the export's greedy decoding (:class:`~kformer.models.exported_decoding.ExportedDecoder`) and
the answer format in its metadata; greedy only, no attention maps."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from kformer.tasks.arithmetic.model import ArithmeticModel, Problem
from kformer.tasks.base import FromExport


class ExportedArithmetic(FromExport, ArithmeticModel):
    """An arithmetic model answering from an export folder (see the module)."""

    def __init__(self, folder: Path, metadata: dict):
        from kformer.data.arithmetic import ArithmeticFormat
        from kformer.models.exported_decoding import ExportedDecoder

        super().__init__(None, ArithmeticFormat(**metadata["arithmetic_format"]), folder, metadata)
        self.decoder = ExportedDecoder(folder, metadata)

    def metadata(self):
        return {**super().metadata(), "export": self.manifest["format"]}

    def solve(self, problems: Sequence[str | Problem], *, beam: int = 1, batch_size: int = 1000) -> list[int | None]:
        self.greedy_only(beam)
        problems = self._problems([problems] if isinstance(problems, str) else problems)
        answers: list[int | None] = []
        for start in range(0, len(problems), max(int(batch_size), 1)):
            sources = [[int(i) for i in row if i] for row in self.format.encode_sources(problems[start:start + batch_size])]
            generated = self.decoder.decode(sources, [self.manifest["max_target_length"]] * len(sources))
            answers.extend(self.format.decode_answer(row) for row in generated)
        return answers

    def warmup(self) -> None:
        self.solve([(1, self.format.ops[0], 1)])


def load_export(folder: str | Path, metadata: dict) -> ExportedArithmetic:
    """The arithmetic model of an export folder (``metadata``: its metadata.json)."""
    return ExportedArithmetic(Path(folder), metadata)
