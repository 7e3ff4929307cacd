"""The English->Tamil benchmark's split (``bench/en_ta.py``): two test hold-outs, two validation
hold-outs, and every other pair of every corpus as training, all with fixed seeds.

- **TICO-19, by document** (the source URL in ``en-ta.meta.tsv``): test = whole documents, about
  15 % of the pairs (seed 0, ``document_holdout``: the same 470 pairs as the earlier en_ta and
  en_ta_levers tables); validation = other whole documents, about 150 pairs (seed 1, as
  ``bench/en_ta_levers.py``).
- **Joshua IPC, by ``seg_id``** (one Tamil Wikipedia sentence, up to four crowd English
  translations of it): :data:`IPC_TEST` seg_ids for test and :data:`IPC_VALID` others for
  validation (seed 0). In the en->ta direction the four translations are four English *sources* of
  one Tamil reference, so there is one reference per sentence whatever we do: each held-out seg_id
  is scored once, with its first English translation (file order: ``ref_index`` 0 where kept) as
  the source; every other pair of a held-out seg_id leaves training too.
- **Training**: the rest of TICO-19 and Joshua IPC, and all of Tatoeba, the Bible, NLPC-UoM
  sentences, the NLPC-UoM glossary and the TICO-19 term lists, each pair naming its corpus
  (``Pair.corpus``, so corpus tags and weights apply). Then every training pair whose normalised
  source (NFC, case-folded, punctuation and whitespace collapsed) is a test or validation source
  of either hold-out is removed, whatever its corpus; :attr:`EnTaSplit.removed` counts them.

``python -m bench.en_ta_splits --write DIR`` writes the split as files for the CLI (:func:`write`):

    kformer train translate --data DIR/train --valid DIR/valid.tsv --test DIR/test.tsv --recipe en-ta --out runs/en-ta
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from bench.harness import require_shared_data

# corpus name (as kformer names it in a folder: kformer.data.corpora) -> its pair file under ../shared/data
CORPORA = {
    "en-ta-tico19": ("en-ta-tico19", "en-ta.tsv"),
    "en-ta-tatoeba": ("en-ta-tatoeba", "en-ta.tsv"),
    "en-ta-joshua-ipc": ("en-ta-joshua-ipc", "en-ta.tsv"),
    "en-ta-bible": ("en-ta-bible", "en-ta.tsv.gz"),
    "en-ta-nlpc-uom": ("en-ta-nlpc-uom", "en-ta.tsv"),
    "en-ta-nlpc-uom/glossary": ("en-ta-nlpc-uom", "glossary.tsv"),
    "en-ta-tico19-terms": ("en-ta-tico19-terms", "en-ta.tsv"),
}
TICO, IPC = "en-ta-tico19", "en-ta-joshua-ipc"
HOLDOUTS = {"tico": TICO, "ipc": IPC}  # column prefix -> the corpus a hold-out is drawn from
TICO_TEST_FRACTION, TICO_VALID_PAIRS = 0.15, 150
IPC_TEST, IPC_VALID = 300, 150  # seg_ids (sentences)


@dataclass
class EnTaSplit:
    """``train``: pairs of every corpus; ``test`` and ``valid``: ``{"tico": pairs, "ipc": pairs}``;
    ``removed``: training pairs dropped per corpus because their source is a held-out one;
    ``test_documents``: the TICO-19 test documents."""

    train: list
    test: dict[str, list]
    valid: dict[str, list]
    removed: dict[str, int] = field(default_factory=dict)
    test_documents: list[str] = field(default_factory=list)

    def train_of(self, corpora) -> list:
        """The training pairs of the named corpora."""
        wanted = set(corpora)
        return [pair for pair in self.train if pair.corpus in wanted]

    def valid_pairs(self) -> list:
        """Both validation parts, interleaved (retrieval tuning reads the first 150: both kinds)."""
        parts = list(self.valid.values())
        return [part[i] for i in range(max(map(len, parts))) for part in parts if i < len(part)]

    def sizes(self) -> dict[str, dict[str, int]]:
        """Pairs per corpus in training, and per hold-out in test and validation."""
        train: dict[str, int] = {}
        for pair in self.train:
            train[pair.corpus] = train.get(pair.corpus, 0) + 1
        return {"train": train, "test": {k: len(v) for k, v in self.test.items()},
                "valid": {k: len(v) for k, v in self.valid.items()}, "removed": dict(self.removed)}


def source_key(text: str) -> str:
    """A source as deduplication compares it: NFC, case-folded, runs of non-word characters one space."""
    from kformer.data.pairs import normalize_text

    return re.sub(r"\W+", " ", normalize_text(text).casefold()).strip()


def _named(pairs, name: str) -> list:
    return [replace(pair, corpus=name) for pair in pairs]


def segment_holdout(pairs, segments, test: int, valid: int, seed: int = 0):
    """``(train, test, valid)`` of pairs keyed by ``segments`` (one id per pair): ``test`` then
    ``valid`` seg_ids drawn at random (fixed ``seed``), each held out as its first pair; every other
    pair of a held-out seg_id is dropped, so no sentence is on two sides."""
    import numpy as np

    order = list(dict.fromkeys(segments))
    if test + valid >= len(order):
        raise ValueError(f"cannot hold out {test} + {valid} of {len(order)} seg_ids")
    picked = [order[i] for i in np.random.default_rng(seed).permutation(len(order))[: test + valid]]
    test_ids, valid_ids = set(picked[:test]), set(picked[test:])
    first: dict[str, object] = {}
    for pair, segment in zip(pairs, segments, strict=True):
        first.setdefault(segment, pair)
    train = [pair for pair, segment in zip(pairs, segments, strict=True) if segment not in test_ids | valid_ids]
    return train, [first[s] for s in order if s in test_ids], [first[s] for s in order if s in valid_ids]


def tico_holdouts(pairs, documents):
    """``(train, test, valid, test_documents)`` of TICO-19 by document (the module's docstring)."""
    from kformer.data.pairs import document_holdout

    rest, test, test_documents = document_holdout(pairs, documents, fraction=TICO_TEST_FRACTION, seed=0)
    rest_documents = [documents[p.line - 1] for p in rest]
    train, valid, _ = document_holdout(rest, rest_documents, fraction=TICO_VALID_PAIRS / len(rest), seed=1)
    return train, test, valid, test_documents


def dedupe(train, held_out) -> tuple[list, dict[str, int]]:
    """``train`` less every pair whose :func:`source_key` is a ``held_out`` pair's; the removed per corpus."""
    keys = {source_key(pair.source) for pair in held_out}
    kept, removed = [], {}
    for pair in train:
        if source_key(pair.source) in keys:
            removed[pair.corpus] = removed.get(pair.corpus, 0) + 1
        else:
            kept.append(pair)
    return kept, removed


def split(limit: int | None = None, data=require_shared_data) -> EnTaSplit:
    """The benchmark's :class:`EnTaSplit` (``data``: the shared-data lookup, replaced in tests).
    ``limit``: at most that many random training pairs per corpus (seed 1), and small hold-outs
    (smoke runs)."""
    from kformer.data.pairs import random_holdout, read_document_ids, read_joshua_ipc, read_pairs

    tico, ipc = data(CORPORA[TICO][0]), data(CORPORA[IPC][0])
    tico_train, tico_test, tico_valid, test_documents = tico_holdouts(
        _named(read_pairs(tico / "en-ta.tsv"), TICO), read_document_ids(tico / "en-ta.meta.tsv"))
    ipc_pairs, segments = read_joshua_ipc(ipc)
    ipc_train, ipc_test, ipc_valid = segment_holdout(_named(ipc_pairs, IPC), segments, IPC_TEST, IPC_VALID)
    by_corpus = {TICO: tico_train, IPC: ipc_train}
    for name, (folder, file) in CORPORA.items():
        if name not in by_corpus:
            by_corpus[name] = _named(read_pairs(data(folder, file)), name)
    test, valid = {"tico": tico_test, "ipc": ipc_test}, {"tico": tico_valid, "ipc": ipc_valid}
    test_keys = {source_key(p.source) for part in test.values() for p in part}
    for name in valid:  # a validation source that is also a test source leaves validation
        valid[name] = [p for p in valid[name] if source_key(p.source) not in test_keys]
    train, removed = dedupe([pair for name in CORPORA for pair in by_corpus[name]],
                            [p for part in (*test.values(), *valid.values()) for p in part])
    if limit:
        picked = []
        for name in CORPORA:
            pairs = [p for p in train if p.corpus == name]
            picked += pairs if len(pairs) <= limit else random_holdout(pairs, limit, seed=1)[1]
        train = picked
        test = {k: v[: max(limit // 10, 10)] for k, v in test.items()}
        valid = {k: v[: max(limit // 20, 5)] for k, v in valid.items()}
    return EnTaSplit(train, test, valid, removed, test_documents)


def write(parts: EnTaSplit, folder) -> dict[str, int]:
    """Write ``parts`` under ``folder`` as the CLI reads them: ``train/`` one pair file per corpus,
    at the path :mod:`kformer.data.corpora` names it by (``train/en-ta-bible/en-ta.tsv`` is
    ``en-ta-bible``, ``train/en-ta-nlpc-uom/glossary.tsv`` ``en-ta-nlpc-uom/glossary``), so
    ``--data folder/train`` keeps every corpus's weight and tag; ``valid.tsv`` (both kinds,
    interleaved), ``test.tsv`` (TICO-19 then Joshua IPC) and ``test-tico.tsv`` / ``test-ipc.tsv``.
    Returns the lines written per file (relative path -> pairs)."""
    from pathlib import Path

    from kformer.data.pairs import write_pairs

    root, written = Path(folder), {}
    files = {f"train/{name}.tsv" if "/" in name else f"train/{name}/en-ta.tsv": parts.train_of([name])
             for name in dict.fromkeys(pair.corpus for pair in parts.train)}
    files |= {"valid.tsv": parts.valid_pairs(), "test.tsv": [p for part in parts.test.values() for p in part]}
    files |= {f"test-{name}.tsv": pairs for name, pairs in parts.test.items()}
    for relative, pairs in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        write_pairs(root / relative, pairs)
        written[relative] = len(pairs)
    return written


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="Write bench/en_ta.py's English->Tamil split as pair files.")
    parser.add_argument("--write", required=True, metavar="DIR", help="folder to write train/, valid.tsv and test*.tsv")
    parser.add_argument("--limit", type=int, default=None, help="at most N training pairs per corpus (smoke runs)")
    args = parser.parse_args()
    for relative, count in write(split(args.limit), args.write).items():
        print(f"{count:>7,}  {args.write}/{relative}")


if __name__ == "__main__":
    main()
