"""A translator on a pretrained encoder (``encoder`` minilm or a BERT folder): the backbone and its
WordPiece source vocabulary, the target vocabulary learned alone, the network, and a frozen
backbone's outputs computed once for training (:func:`cached_states`)."""

from __future__ import annotations

from typing import Any

from kformer.auto import AUTO
from kformer.data.pairs import Pair
from kformer.tasks.translate.settings import TranslateConfig

ENCODER_CHOICES = "scratch, minilm"


def uses_pretrained(config: TranslateConfig) -> bool:
    """Whether ``config.encoder`` names a pretrained encoder (``"auto"`` not resolved yet: no)."""
    return config.encoder not in ("scratch", AUTO)


def check_encoder_source(config: TranslateConfig) -> None:
    """A missing package or folder fails before anything is read or written (BadInput ``encoder``)."""
    if uses_pretrained(config):
        from kformer.models.pretrained import backbone_source

        backbone_source(config.encoder, "encoder", ENCODER_CHOICES)


def load_encoder(config: TranslateConfig):
    """``(backbone, WordPieceVocabulary)`` of ``config.encoder``, from local files only."""
    from kformer.models.pretrained import backbone_source, load_pretrained_bert
    from kformer.text.wordpiece import WordPieceVocabulary

    backbone, tokenizer = load_pretrained_bert(backbone_source(config.encoder, "encoder", ENCODER_CHOICES))
    return backbone, WordPieceVocabulary(tokenizer)


def learn_target_vocabulary(config: TranslateConfig, pairs: list[Pair]):
    """The target side's vocabulary alone (subwords of ``target_vocab_size``, or whole words)."""
    from kformer.text.subword import Subwords, train_sentencepiece
    from kformer.text.word_vocab import WordVocabulary

    targets = [p.target for p in pairs]
    if config.tokens == "words":
        return WordVocabulary.learn(targets)
    return Subwords(train_sentencepiece(targets, config.target_vocab_size))


def longest_source(backbone) -> int:
    """The most source tokens the backbone's position table covers."""
    return int(backbone.max_sequence_length)


def build_model(config: TranslateConfig, backbone, target_vocab):
    """:class:`~kformer.models.pretrained_seq2seq.PretrainedEncoderSeq2Seq`: frozen unless
    ``encoder_learning_rate`` is above 0."""
    from kformer.models.pretrained_seq2seq import PretrainedEncoderSeq2Seq

    return PretrainedEncoderSeq2Seq(
        backbone, target_vocab.vocab_size, config.max_length, config.max_length + 1, dim=config.dim,
        heads=config.heads, ff_dim=config.ff_dim, decoder_layers=config.decoder_layers, dropout=config.dropout,
        positions=config.positions, tie_embeddings=config.tie_embeddings, norm_first=config.norm_first,
        freeze_encoder=config.encoder_learning_rate == 0,
    )


def cached_states(model, sources: list[list[int]]):
    """A frozen backbone's outputs per source (one ``(length, hidden)`` float32 array each), or
    None when the backbone is fine-tuned (it then runs in every step)."""
    from kformer.models.pretrained_seq2seq import encoder_states

    return encoder_states(model, sources) if model.freeze_encoder else None


def optimizer_rates(config: TranslateConfig, model) -> dict[str, Any]:
    """``compile_seq2seq``'s arguments for a fine-tuned backbone: its variables move at
    ``encoder_learning_rate / learning_rate`` times the decoder's rate."""
    if not config.encoder_learning_rate:
        return {}
    return {"slow_variables": model.encoder.trainable_variables,
            "slow_scale": config.encoder_learning_rate / config.learning_rate}


def manifest_entry(config: TranslateConfig, backbone) -> dict[str, Any]:
    """The folder's ``encoder`` entry (what it was made from; its weights are in ``model.keras``)."""
    return {"name": config.encoder, "kind": "bert", "frozen": config.encoder_learning_rate == 0,
            "layers": int(backbone.num_layers), "hidden_dim": int(backbone.hidden_dim)}
