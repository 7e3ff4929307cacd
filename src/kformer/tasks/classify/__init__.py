"""Text classification: train on labelled texts, predict, score, explain.

Life cycle::

    from kformer.tasks import classify

    result = classify.train({"epochs": 3}, "tickets.csv", "runs/tickets")    # or (texts, labels)
    model = classify.load("runs/tickets")                                     # or kformer.load(...)
    model.predict(["my screen is flickering"], top_k=3, threshold=0.6)
    model.evaluate("test.csv")                                                # accuracy, macro-F1, ...
    model.attention_maps("my screen is flickering").maps["encoder"]           # (layers, heads, L, L)
    classify.load("runs/tickets", runtime="onnx")                             # predicting on ONNX Runtime

One module a job: :mod:`.settings` (:class:`ClassifyConfig`), :mod:`.auto` (what ``"auto"``
settings become), :mod:`.data` (reading and splitting), :mod:`.model` (the loaded
:class:`Classifier` and the folder format), :mod:`.runtimes` (where its network predicts),
:mod:`.network` (building and fitting the network), :mod:`.wide` and :mod:`.wide_fit` (the
n-gram part beside it), :mod:`.calibration` (the unknown route's threshold), :mod:`.export`
(what an export holds), :mod:`.train` (the training run).
"""

from kformer.tasks.classify.data import Data, as_labelled
from kformer.tasks.classify.exported import ExportedClassifier, load_export
from kformer.tasks.classify.model import Classifier, load
from kformer.tasks.classify.settings import ClassifyConfig
from kformer.tasks.classify.train import train

predict = Classifier.predict
evaluate = Classifier.evaluate
attention_maps = Classifier.attention_maps

__all__ = ["Classifier", "ClassifyConfig", "Data", "ExportedClassifier", "as_labelled", "attention_maps", "evaluate",
           "load", "load_export", "predict", "train"]

