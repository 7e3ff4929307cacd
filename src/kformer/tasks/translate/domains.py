"""Several corpora in one translator: each corpus's sampling weight, and its domain tag.

- **Weights** multiply a corpus's natural share of an epoch (:mod:`kformer.data.pair_batches`):
  1 trains each of its pairs once per epoch, 2 twice, 0.5 a seeded half drawn afresh each epoch.
  A corpus the data names no weight for gets 1, unless no corpus has one and there are several:
  then ``auto`` chooses them by temperature sampling (:func:`~.auto.corpus_weights_rule`) and
  ``metrics.json["auto"]["corpus_weights"]`` says why. Validation and test pairs are never resampled.
- **Tags** (``corpus_tags`` on; Kobus et al. 2017, "Domain Control for Neural Machine Translation"):
  each training source starts with one token naming its corpus's domain (the data's ``tag``, else
  the corpus's name made a word, :func:`~kformer.data.corpora.default_tag`), except a seeded
  :data:`NEUTRAL_SHARE` of them, so a source given without a domain is in distribution too. The
  token is one id whatever the vocabulary: ``<tag>``, a user-defined SentencePiece piece or a word
  of a word vocabulary learned with the sources; for a pretrained BERT encoder the tag's
  ``[unusedN]`` token (BERT's WordPiece tokenizer splits ``[unused0]`` written in text into
  ``[ unused ##0 ]``, so the id is put after ``[CLS]`` instead of writing the token into the text).
  The folder's ``kformer.json["tags"]`` maps each tag to its token and id; a translation asks for
  one with ``domain=`` (:func:`domain_ids`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from kformer.data.corpora import Corpus, default_tag
from kformer.errors import BadInput, CorruptModel

# Of the training pairs of tagged corpora, the share that keeps no tag, so that a source given
# without a domain is in distribution. To be chosen on validation (bench/en_ta); not yet measured.
NEUTRAL_SHARE = 0.1


@dataclass(frozen=True)
class CorpusMix:
    """The corpora of a run, their ``weight`` settled (1 unless given or chosen) and their ``tag``
    settled (None: tags off); ``weights_why`` says why when ``auto`` chose the weights."""

    corpora: tuple[Corpus, ...]
    weights_why: str | None = None

    @property
    def weights(self) -> tuple[float, ...] | None:
        """One weight per corpus, or None when every pair trains once per epoch."""
        weights = tuple(float(corpus.weight) for corpus in self.corpora)
        return None if all(weight == 1.0 for weight in weights) else weights

    @property
    def tags(self) -> list[str]:
        """The distinct tags, sorted ([] with tags off)."""
        return sorted({corpus.tag for corpus in self.corpora if corpus.tag})

    def groups(self, pairs) -> np.ndarray:
        """``(pairs,)`` each pair's corpus, an index into :attr:`corpora`."""
        index = {corpus.name: i for i, corpus in enumerate(self.corpora)}
        return np.array([index[pair.corpus] for pair in pairs], dtype=np.int64)

    def tag_of(self, pair) -> str | None:
        """The tag of ``pair``'s corpus (None for a neutral pair or with tags off)."""
        return next((corpus.tag for corpus in self.corpora if corpus.name == pair.corpus), None)

    def record_weights(self, auto) -> None:
        """Put ``auto``'s choice of weights, when it made one, in the run's ``auto`` choices
        (the settings line and ``metrics.json["auto"]["corpus_weights"]``)."""
        from kformer.tasks.translate.auto import CORPUS_WEIGHTS_RULE

        if self.weights_why:
            auto.chosen["corpus_weights"] = {"value": {corpus.name: corpus.weight for corpus in self.corpora},
                                             "why": self.weights_why, "rule": CORPUS_WEIGHTS_RULE}


def corpus_mix(corpora: Sequence[Corpus], train, tags_on: bool) -> CorpusMix:
    """The run's :class:`CorpusMix` for its ``train`` pairs (each naming its corpus)."""
    from kformer.tasks.translate.auto import corpus_weights_rule

    sizes = {corpus.name: 0 for corpus in corpora}
    for pair in train:
        sizes[pair.corpus] += 1
    why = None
    weights = {corpus.name: 1.0 if corpus.weight is None else corpus.weight for corpus in corpora}
    if len(corpora) > 1 and all(corpus.weight is None for corpus in corpora):
        weights, why = corpus_weights_rule(sizes)
    if sum(weights[name] * size for name, size in sizes.items()) < 1:
        raise BadInput("the corpus weights leave no training pair in an epoch; raise them", field="data")
    settled = tuple(replace(corpus, weight=weights[corpus.name],
                            tag=(corpus.tag or default_tag(corpus.name)) if tags_on else None) for corpus in corpora)
    return CorpusMix(settled, why)


def epoch_rows(mix: CorpusMix, train, seed: int) -> np.ndarray:
    """The training pairs (indices into ``train``) of one epoch as the weights draw it: every pair
    once without weights (what the ``auto`` rules over the encoded pairs measure)."""
    from kformer.data.pair_batches import weighted_draw

    if mix.weights is None:
        return np.arange(len(train))
    return weighted_draw(mix.groups(train), mix.weights, np.random.default_rng(seed))


def datastore_order(mix: CorpusMix | None, groups: np.ndarray | None, count: int, seed: int) -> np.ndarray:
    """``(count,)`` the training pairs in the order a datastore cut short by the time budget keeps
    them: the pairs of the corpora of highest weight first (the ones each epoch trains most often
    per pair: auto's temperature favours small in-domain corpora), each corpus's pairs in a seeded
    random order (a file's order says nothing; its first lines are often one book or document)."""
    rng = np.random.default_rng(seed)
    shuffled = rng.permutation(count)
    if mix is None or groups is None or mix.weights is None:
        return shuffled
    weight = np.asarray(mix.weights)[np.asarray(groups)[shuffled]]
    return shuffled[np.argsort(-weight, kind="stable")]


def records(mix: CorpusMix, splits: dict[str, list]) -> list[dict[str, Any]]:
    """What the folder records per corpus: name, file, training pairs, weight, tag, and the pairs
    of each split (``splits``: ``{"train": pairs, "valid": ..., "test": ...}``)."""
    rows = []
    for corpus in mix.corpora:
        counts = {split: sum(pair.corpus == corpus.name for pair in pairs) for split, pairs in splits.items()}
        rows.append({"name": corpus.name, "path": None if corpus.path is None else str(corpus.path),
                     "pairs": counts.get("train", 0), "weight": corpus.weight, "tag": corpus.tag, "splits": counts})
    return rows


# --- tag tokens and ids ------------------------------------------------------------------------------


def tag_token(tag: str) -> str:
    """The token a tag is learned as in a subword or word vocabulary."""
    return f"<{tag}>"


def source_symbols(mix: CorpusMix) -> list[str]:
    """The tokens the source vocabulary must keep whole (``[]`` with tags off)."""
    return [tag_token(tag) for tag in mix.tags]


def tag_table(vocab, tags: Sequence[str]) -> dict[str, dict[str, Any]]:
    """``{tag: {"token", "id"}}`` in the source ``vocab``: ``<tag>`` (learned with it), or for a
    BERT WordPiece vocabulary ``[unusedN]``, N the tag's place in sorted order."""
    wordpiece = getattr(vocab, "cls_id", None) is not None
    table = {}
    for place, tag in enumerate(sorted(tags)):
        token = f"[unused{place}]" if wordpiece else tag_token(tag)
        token_id = _token_id(vocab, token)
        if token_id is None:
            raise BadInput(f"the source vocabulary has no {token} token for the tag {tag!r}" +
                           (" (the encoder's vocabulary has too few [unusedN] tokens)" if wordpiece else ""),
                           field="corpus_tags")
        table[tag] = {"token": token, "id": token_id}
    return table


def _token_id(vocab, token: str) -> int | None:
    """The id of ``token`` in ``vocab`` (a SentencePiece, word or WordPiece vocabulary), or None."""
    if hasattr(vocab, "proto"):
        import sentencepiece as spm

        processor = spm.SentencePieceProcessor(model_proto=vocab.proto)
        token_id = processor.piece_to_id(token)
        return None if token_id == processor.unk_id() else int(token_id)
    tokens = list(vocab.tokens)
    return tokens.index(token) if token in tokens else None


def encode_sources(vocab, pairs, tag_ids: Sequence[int | None]) -> list[list[int]]:
    """The ids of the pairs' sources in ``vocab``, each led by its tag id (:func:`tagged`)."""
    return tagged(vocab, vocab.encode([pair.source for pair in pairs]), tag_ids)


def tag_position(vocab) -> int:
    """Where a source's tag id goes: 1, after ``[CLS]``, for a WordPiece vocabulary; else 0."""
    return 1 if getattr(vocab, "cls_id", None) is not None else 0


def tagged(vocab, sources: list[list[int]], tag_ids: Sequence[int | None]) -> list[list[int]]:
    """Each encoded source with its tag id at :func:`tag_position`; None leaves a source as it is."""
    at = tag_position(vocab)
    return [ids if tag is None else [*ids[:at], tag, *ids[at:]] for ids, tag in zip(sources, tag_ids, strict=True)]


def training_tags(mix: CorpusMix, pairs, table: dict[str, dict], seed: int) -> list[int | None]:
    """The tag id of each training pair: its corpus's, but None for a seeded :data:`NEUTRAL_SHARE`
    of them (and for all with tags off)."""
    ids = held_out_tags(mix, pairs, table)
    neutral = np.random.default_rng([seed, 17]).random(len(ids)) < NEUTRAL_SHARE
    return [None if skip else tag for tag, skip in zip(ids, neutral, strict=True)]


def held_out_tags(mix: CorpusMix, pairs, table: dict[str, dict]) -> list[int | None]:
    """The tag id of each validation or test pair: its corpus's (None for a pair of no corpus the
    run trained on -- given files are neutral -- and with tags off)."""
    tags = [mix.tag_of(pair) for pair in pairs]
    return [None if tag is None else table[tag]["id"] for tag in tags]


# --- asking for a domain --------------------------------------------------------------------------


def domain_names(manifest: dict, domain: str | Sequence[str | None] | None, count: int) -> list[str | None]:
    """The tag for each of ``count`` sources: ``domain`` one tag for all, one per source (None:
    neutral), or None. BadInput (field ``domain``) for an unknown tag, or for any tag when the
    folder was trained without them."""
    if domain is None:
        return [None] * count
    if not isinstance(domain, str | Sequence):
        raise BadInput(f"{{field}} must be a tag or a list of tags, not {domain!r}", field="domain")
    names = [domain] * count if isinstance(domain, str) else list(domain)
    if len(names) != count:
        raise BadInput(f"{{field}} must be one tag or one per text ({count}), not {len(names)}", field="domain")
    table = manifest.get("tags") or {}
    for name in names:
        if name is not None and name not in table:
            if not table:
                raise BadInput("{field}: this model was trained without corpus tags (corpus_tags off); "
                               "translate without a domain", field="domain")
            raise BadInput(f"unknown {{field}} {name!r}; known: {', '.join(sorted(table))}", field="domain")
    return names


def domain_ids(manifest: dict, domain: str | Sequence[str | None] | None, count: int) -> list[int | None]:
    """The tag id for each of ``count`` sources (:func:`domain_names`; None: untagged)."""
    names = domain_names(manifest, domain, count)
    try:
        return [None if name is None else int(manifest["tags"][name]["id"]) for name in names]
    except (TypeError, KeyError, ValueError):
        raise CorruptModel("kformer.json's tags entry is not {tag: {token, id}}; retrain the model",
                           field="model_dir") from None
