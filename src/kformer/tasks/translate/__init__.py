"""Translation: train an encoder-decoder Transformer on sentence pairs, translate, score, explain.

The model is a :class:`~kformer.models.seq2seq.Seq2SeqTransformer` over SentencePiece subwords
learned from the training pairs only (one vocabulary for both sides when they share a script);
a corpus of a handful of pairs gets whole words instead (``tokens``,
:mod:`kformer.text.word_vocab`). Both sides are NFC-normalised
(:func:`kformer.data.pairs.normalize_text`).

Life cycle::

    from kformer.tasks import translate
    pairs = [("one two", "ஒன்று இரண்டு"), ("three", "மூன்று"), ...]       # or a path to a TSV file
    result = translate.train({"epochs": 5, "dim": 32}, pairs, "runs/tiny", valid=pairs, test=pairs)
    translator = translate.load("runs/tiny")                 # or kformer.load("runs/tiny")
    translator.translate(["one two"], beam=4)                 # ["ஒன்று இரண்டு"]
    translator.evaluate("test.tsv")                           # {"bleu", "chrf", "exact_match", "n", ...}
    translator.attention_maps("one two").maps["cross"].shape  # (layers, heads, target, source)

One module a job: :mod:`.settings` (:class:`TranslateConfig`), :mod:`.auto` (what ``"auto"``
settings become) and :mod:`.stats` (what its rules read), :mod:`.pairs` (reading and holding out
pairs), :mod:`.batches` (training batches), :mod:`.model` (the loaded :class:`Translator` and the
folder format), :mod:`.train` (the training run), :mod:`.retrieval` (kNN-MT: the datastore in the
folder and the choice of its weights), :mod:`.domains` (several corpora: their sampling weights and
domain tags; reading them is :mod:`kformer.data.corpora`), :mod:`.budget` (``max_minutes`` over the
whole command: training's share, each later phase's estimate and cut) and :mod:`.phases` (the phases
after training, sized to the time left, with their progress).
"""

from kformer.tasks.translate.domains import domain_names
from kformer.tasks.translate.exported import ExportedTranslator, load_export
from kformer.tasks.translate.model import MAX_REPEAT, Translator, check_decoding, load, save
from kformer.tasks.translate.pairs import PairData, read_pair_data
from kformer.tasks.translate.retrieval import Datastore, build_retrieval, remove_retrieval
from kformer.tasks.translate.settings import TranslateConfig
from kformer.tasks.translate.train import train

translate = Translator.translate
evaluate = Translator.evaluate
attention_maps = Translator.attention_maps

__all__ = ["Datastore", "ExportedTranslator", "MAX_REPEAT", "PairData", "TranslateConfig", "Translator", "attention_maps",
           "check_decoding", "domain_names", "evaluate", "load", "load_export", "read_pair_data", "build_retrieval", "remove_retrieval",
           "save", "train", "translate"]

