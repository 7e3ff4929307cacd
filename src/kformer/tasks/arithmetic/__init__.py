"""Multi-digit addition and subtraction: train on generated problems, solve, score, explain.

The model is a :class:`~kformer.models.seq2seq.Seq2SeqTransformer` that reads a problem
(``1234+4567``, written for it as :class:`~kformer.data.arithmetic.ArithmeticFormat` says) and
writes the answer. Training draws fresh problems every batch and never one of the held-out set.

Life cycle::

    from kformer.tasks import arithmetic
    result = arithmetic.train(arithmetic.ArithmeticConfig(digits=2, epochs=2), None, "runs/arith")
    model = arithmetic.load("runs/arith")
    model.solve(["12+34", "99-5"])            # [46, 94]
    model.evaluate(["12+34=46", "9-87=-78"])  # exact match, per-character accuracy
    model.attention_maps("12+34").maps["cross"].shape   # (layers, heads, answer, source)

One module a job: :mod:`.settings` (:class:`ArithmeticConfig`), :mod:`.model` (the loaded
:class:`ArithmeticModel` and the folder format), :mod:`.train` (the training run).
"""

from kformer.tasks.arithmetic.exported import ExportedArithmetic, load_export
from kformer.tasks.arithmetic.model import ArithmeticModel, load
from kformer.tasks.arithmetic.settings import ArithmeticConfig
from kformer.tasks.arithmetic.train import train

solve = ArithmeticModel.solve
evaluate = ArithmeticModel.evaluate
attention_maps = ArithmeticModel.attention_maps

__all__ = ["ArithmeticConfig", "ArithmeticModel", "ExportedArithmetic", "attention_maps", "evaluate", "load",
           "load_export", "solve", "train"]

