"""The settings of a classify run: one frozen dataclass (recipe sections ``[data]``, ``[model]``,
``[training]``); every field is also a ``kformer train classify`` flag, and what ``"auto"``
becomes is said once, by the rule's summary (:mod:`kformer.tasks.classify.auto`)."""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from kformer.auto import Rules
from kformer.config import AUTO, Auto, TaskSettings, coerce, setting
from kformer.errors import BadInput
from kformer.tasks.classify.auto import RULES
from kformer.tasks.classify.calibration import KEEP

CONTRASTIVE_PER_CLASS = 4  # texts of a class per training batch with a contrastive term (P x K sampling)
CONTRASTIVE_TEMPERATURE = 0.1  # Khosla et al. 2020's common value for the supervised contrastive loss
OUTLIER_WEIGHT = 1.0  # each unknown_label row's loss weighs as much as an in-scope row's (not tuned on validation yet)

TASK = "classify"
SCRATCH_BACKBONES = ("scratch", "bert-scratch")


@dataclass(frozen=True)
class ClassifyConfig(TaskSettings):
    """Every setting of a classify run (recipe sections ``[data]``, ``[model]``, ``[training]``)."""

    task: ClassVar[str] = TASK

    rules: ClassVar[Rules] = RULES  # what each "auto" setting becomes
    # what a recipe that does not name these gets (:func:`kformer.config.make_config`): recipes
    # written before the wide part train as they were measured
    RECIPE_DEFAULTS: ClassVar[dict[str, Any]] = {"wide": False, "refit": False}

    text_column: str = setting("text", "data", "column holding the text")
    label_column: str = setting("label", "data", "column holding the label")
    tokenizer: Literal["word", "wordpiece"] = setting("word", "data", "word or wordpiece (scratch backbones only)")
    truncation: Literal["head", "tail", "head_tail"] | Auto = setting(
        AUTO, "data", "which part of a long text to keep, word tokenizer")
    ngrams: int = setting(1, "data", "2: the word vocabulary also holds word bigrams (fastText-style)")
    vocab_size: int | Auto = setting(AUTO, "data", "vocabulary size learned from the training text")
    max_length: int | Auto = setting(AUTO, "data", "tokens per text; longer texts are truncated")
    valid_fraction: float = setting(0.1, "data", "stratified hold-out share when no validation data is given")
    unknown_label: str | None = setting(
        None, "data", "the label of rows that belong to no class (a desk's \"none of these\"): they never become a "
        "class; in training they pull the network's prediction toward uniform (outlier exposure, weight "
        "unknown_weight), and in validation (with no validation data: valid_fraction of them) they are out-of-scope "
        "texts the unknown route's threshold is set on", metavar="NAME")

    backbone: str = setting("scratch", "model", "scratch (kformer's encoder) | bert-scratch | minilm | a KerasHub/"
                            "Hugging Face BERT folder")
    pooling: Literal["mean", "cls"] = setting(
        "mean", "model", "BERT backbones' text vector: mean of the non-padding token vectors (how all-MiniLM-L6-v2 "
        "was trained), or cls: the [CLS] pooler")
    freeze: bool = setting(
        False, "model", "BERT backbones: keep the backbone's weights; text vectors are computed once (cached in "
        "training/) and only the head is trained: minutes instead of hours on a CPU")
    freeze_token_embedding: bool = setting(
        False, "model", "pretrained BERT backbones: keep the token embedding table as loaded while the rest "
        "fine-tunes (MiniLM: 11.7M of its 22.7M weights)")
    wide: bool | Auto = setting(
        AUTO, "model", "also fit a TF-IDF n-gram + logistic regression part on the training split and mix its "
        "probabilities with the network's by a weight chosen on validation; metrics.json \"wide\" shows what each "
        "part scores; exports carry it in their graph (a recipe that does not name it: off)")
    wide_refit: bool = setting(
        False, "model", "once the mix weight is chosen, fit the wide part again on the training and validation "
        "texts together (same C; its time counts in max_minutes; on in the banking77-minilm and imdb-best recipes)")
    wide_ngrams: int = setting(2, "model", "longest word n-gram of the wide part: 1 (words), 2 (words and word "
                               "pairs) or 3 (also triples, in twice its fit time)")
    dim: int | Auto = setting(AUTO, "model", "model width")
    heads: int | Auto = setting(AUTO, "model", "attention heads")
    ff_dim: int | Auto = setting(AUTO, "model", "feed-forward width")
    blocks: int | Auto = setting(AUTO, "model", "encoder blocks")
    dropout: float | Auto = setting(AUTO, "model", "dropout rate")
    positions: Literal["learned", "sinusoidal"] = setting("learned", "model", "position embeddings")
    window: int = setting(0, "model", "> 0: self-attention within windows of this many tokens (long documents)")

    epochs: int | Auto = setting(AUTO, "training", "maximum epochs, early stopping may end sooner")
    batch_size: int | Auto = setting(AUTO, "training", "texts per training step")
    learning_rate: float | Auto = setting(AUTO, "training", "peak learning rate, after warmup")
    warmup: float = setting(0.1, "training", "fraction of all steps spent warming up")
    decay: Literal["cosine", "linear", "none"] = setting("cosine", "training", "none: a constant rate, no warmup")
    weight_decay: float = setting(0.01, "training", "AdamW weight decay")
    label_smoothing: float | Auto = setting(AUTO, "training", "label smoothing, 0 = off")
    class_weights: bool = setting(False, "training", "weight classes inversely to their frequency")
    patience: int | Auto = setting(AUTO, "training", "epochs without validation macro-F1 improvement before stopping")
    refit: bool | Auto = setting(
        AUTO, "training", "once validation has chosen the settings, the best epoch and the wide part's weight, train "
        "the network again from scratch on the training and validation texts together for that many epochs (and the "
        "wide part, as wide_refit); metrics.json \"valid\" keeps the first network's validation scores, \"refit\" "
        "what the second run did; its time counts in max_minutes. Not with calibrate or freeze")
    contrastive_weight: float | Auto = setting(
        AUTO, "training", "> 0: add this weight times a supervised contrastive loss (SupCon, Khosla et al. 2020) of the "
        "L2-normalised pooled text vectors of each training batch to the cross-entropy, pulling each class's texts "
        "into a tight cluster (what the distance ood scores measure); an anchor's positives are the other texts of "
        "its class in the batch (a text with none adds nothing: see contrastive_per_class), unknown_label rows are "
        "only pushed away; 0: off. Not with freeze",
        metavar="W")
    contrastive_temperature: float = setting(
        CONTRASTIVE_TEMPERATURE, "training", "the supervised contrastive loss's temperature (0.1: Khosla et al. 2020's common "
        "value; lower sharpens the clusters)", metavar="T")
    contrastive_per_class: int = setting(
        CONTRASTIVE_PER_CLASS, "training", "with contrastive_weight: each training batch is made of runs of this many "
        "texts of one class (batch_size / this many classes a batch), so every text has positives in its batch; "
        "0 or 1: the usual shuffled batches of similar lengths", metavar="M")
    seed: int = setting(0, "training", "random seed")
    max_minutes: float | None = setting(None, "training", "stop after this many minutes, keeping the best weights "
                                        "(resumed: minutes of training in all)", metavar="M")
    calibrate: bool | Auto = setting(
        AUTO, "training", "choose the unknown route's threshold on the validation set (its labels the training "
        "data lacks are out-of-scope texts; the threshold maximises accuracy over in- and out-of-scope texts, or "
        "reaches unknown_recall; without them unknown_keep of the correct predictions stay above it); predict and "
        "serve use it by default")
    unknown_recall: float | None = setting(
        None, "training", "set the calibrated threshold for this share of the out-of-scope validation texts routed "
        "to unknown (0 < R <= 1; say 0.8) instead of the maximum accuracy; metrics.json \"calibration\" gives the "
        "in-scope accuracy, out-of-scope recall and precision it has on validation (without out-of-scope validation "
        "texts unknown_keep sets it)", metavar="R")
    unknown_weight: float = setting(
        OUTLIER_WEIGHT, "training", "with unknown_label: the weight of each of its rows' loss, the cross-entropy of the "
        "network's prediction to the uniform distribution (outlier exposure, Hendrycks et al. 2019); 1: it counts as "
        "much as an in-scope row's", metavar="W")
    unknown_keep: float = setting(
        KEEP, "training", "without out-of-scope validation texts: the share of the correctly predicted in-scope "
        "validation texts the calibrated threshold keeps at or above it (0 < K <= 1)", metavar="K")
    ood_score: Literal["probability", "mahalanobis", "knn", "mahalanobis_layers", "tfidf", "combined"] | Auto = setting(
        AUTO, "training", "what the unknown route thresholds (higher = more in scope; --threshold is in its units): "
        "probability (the best class probability, 0..1), mahalanobis (minus the squared Mahalanobis distance of the "
        "text's pooled vector to the nearest training class mean, one shared covariance), knn (minus the distance "
        "of the normalised vector to its 10th nearest normalised training vector), mahalanobis_layers (backbone "
        "scratch: the Mahalanobis distance on every encoder block's pooled output, each standardised on the training "
        "texts, averaged), tfidf (with the wide part: minus the cosine distance of the text's TF-IDF vector to its "
        "5th nearest of at most 20,000 training texts') or combined (with the wide part: the network score "
        "validation picks and the tfidf novelty, standardised on the training texts, added with a weight on the "
        "novelty of 0, .25, .5, .75 or 1 chosen by validation AUROC); the statistics of the training texts are kept "
        "in the folder's ood/; every runtime and both export formats compute the same score")
    precision: Literal["float32", "mixed_bfloat16"] = setting(
        "float32", "training", "mixed_bfloat16: compute in bfloat16 (weights and outputs stay float32); see bench/precision.py")

    def __post_init__(self):
        hints = typing.get_type_hints(type(self))
        for f in dataclasses.fields(self):
            coerce(getattr(self, f.name), hints[f.name], f.name)  # types and choices
        for name in ("epochs", "max_length", "batch_size", "vocab_size", "dim", "heads", "ff_dim", "blocks"):
            if getattr(self, name) != AUTO and getattr(self, name) < 1:
                raise BadInput(f"{{field}} must be at least 1, got {getattr(self, name)}", field=name)
        for name in ("dropout", "warmup", "weight_decay", "label_smoothing", "valid_fraction"):
            if getattr(self, name) != AUTO and not 0.0 <= getattr(self, name) < 1.0:
                raise BadInput(f"setting {{field}} = {getattr(self, name)} must be at least 0 and below 1", field=name)
        if self.patience != AUTO and self.patience < 0:
            raise BadInput(f"{{field}} must be 0 or more, got {self.patience}", field="patience")
        if self.ngrams not in (1, 2) or (self.ngrams == 2 and self.tokenizer != "word"):
            raise BadInput(f'setting {{field}} = {self.ngrams!r}: use 1, or 2 with tokenizer = "word"', field="ngrams")
        if self.freeze and (self.backbone == "scratch" or self.pooling != "mean"):
            raise BadInput("{field} needs a BERT backbone (minilm, a folder, bert-scratch) with pooling = \"mean\"",
                           field="freeze")
        if self.freeze_token_embedding and self.scratch:
            raise BadInput("{field} needs a pretrained BERT backbone (minilm or a folder): a scratch model's "
                           "embeddings must be learned", field="freeze_token_embedding")
        if self.wide_ngrams not in (1, 2, 3):
            raise BadInput(f"setting {{field}} = {self.wide_ngrams!r}: use 1, 2 or 3", field="wide_ngrams")
        if self.window < 0:
            raise BadInput(f"setting {{field}} = {self.window} must be 0 (full attention) or a window length", field="window")
        if self.learning_rate != AUTO and self.learning_rate <= 0:
            raise BadInput(f"{{field}} must be above 0, got {self.learning_rate}", field="learning_rate")
        calibrating = self.calibrate is True or self.unknown_recall is not None
        if self.refit is True and (calibrating or self.freeze):
            raise BadInput("{field} trains the final network on the validation texts too; " + (
                "calibrate sets its threshold on those texts" if calibrating else "freeze trains only a head on "
                "cached vectors") + ": use one or the other", field="refit")
        for name in ("unknown_recall", "unknown_keep"):
            share = getattr(self, name)
            if share is not None and not 0.0 < share <= 1.0:
                raise BadInput(f"setting {{field}} = {share} must be above 0 and at most 1 (a share)", field=name)
        if self.unknown_recall is not None and self.calibrate is False:
            raise BadInput("{field} sets the calibrated threshold: leave calibrate on (or auto)", field="unknown_recall")
        if self.unknown_weight <= 0:
            raise BadInput(f"setting {{field}} = {self.unknown_weight} must be above 0", field="unknown_weight")
        if self.unknown_label is not None and (not self.unknown_label.strip() or self.freeze):
            raise BadInput("{field} " + ("must name a label" if not self.unknown_label.strip() else
                           "trains the whole network away from confident answers; freeze trains only a head: use one "
                           "or the other"), field="unknown_label")
        if self.contrastive_weight != AUTO and (self.contrastive_weight < 0 or
                                                (self.contrastive_weight > 0 and self.freeze)):
            raise BadInput(f"setting {{field}} = {self.contrastive_weight} " + (
                "must be 0 (off) or above" if self.contrastive_weight < 0 else "trains the text vectors; freeze keeps "
                "the backbone that makes them (only a head trains): use one or the other"), field="contrastive_weight")
        if self.contrastive_per_class < 0:
            raise BadInput(f"setting {{field}} = {self.contrastive_per_class} must be 0 or more",
                           field="contrastive_per_class")
        if self.contrastive_temperature <= 0:
            raise BadInput(f"setting {{field}} = {self.contrastive_temperature} must be above 0",
                           field="contrastive_temperature")
        if self.ood_score == "mahalanobis_layers" and self.backbone != "scratch":
            raise BadInput("{field} mahalanobis_layers reads the blocks of kformer's own encoder: backbone scratch",
                           field="ood_score")
        if self.ood_score in ("tfidf", "combined") and self.wide is False:
            raise BadInput(f"{{field}} {self.ood_score} reads the wide n-gram part's TF-IDF vectors: leave wide on (or "
                           "auto)", field="ood_score")
        if self.max_minutes is not None and self.max_minutes <= 0:
            raise BadInput(f"{{field}} must be above 0, got {self.max_minutes}", field="max_minutes")

    @property
    def scratch(self) -> bool:
        """True when the network is learned from nothing (and so is its vocabulary)."""
        return self.backbone in SCRATCH_BACKBONES
