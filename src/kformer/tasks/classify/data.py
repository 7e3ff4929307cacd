"""A classify run's data: reading labelled texts, checking them, and cutting the splits.

No Keras here, so bad input fails before that second of start-up.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from kformer.data.readers import LabelledTexts
from kformer.errors import BadInput
from kformer.tasks.base import check_texts

MAX_LABELS = 1000  # more labels in the training data is refused (see read_all)

Data = str | os.PathLike | tuple[Sequence[str], Sequence[str]] | LabelledTexts


def as_labelled(data: Data, text_column: str = "text", label_column: str = "label", name: str = "data") -> LabelledTexts:
    """``data`` (a path, a ``(texts, labels)`` pair of lists, or LabelledTexts) as LabelledTexts.

    In-memory rows with an empty text or label are dropped (and counted), as the readers do.
    """
    if isinstance(data, LabelledTexts):
        return data
    if isinstance(data, str | os.PathLike):
        from kformer.data.readers import read_labelled

        return read_labelled(data, text_column, label_column)
    if not (isinstance(data, tuple | list) and len(data) == 2):
        raise BadInput(f"{{field}} must be a file path, a (texts, labels) pair or LabelledTexts, not {type(data).__name__}",
                       field=name)
    texts = check_texts(data[0], f"{name}.texts")
    labels = [str(label).strip() for label in data[1]]
    if len(texts) != len(labels):
        raise BadInput(f"{{field}}: {len(texts)} texts but {len(labels)} labels", field=name)
    rows = [(t.strip(), lb) for t, lb in zip(texts, labels, strict=True) if t.strip() and lb]
    if not rows:
        raise BadInput("{field} has no rows with both a text and a label", field=name)
    return LabelledTexts([t for t, _ in rows], [lb for _, lb in rows], f"<{name}>", len(texts) - len(rows))


def read_all(config, data: Data | None, valid: Data | None, test: Data | None):
    """``(train, valid or None, test or None)`` as LabelledTexts, checked: at least two and at most
    :data:`MAX_LABELS` labels, and enough rows per label for a hold-out when ``valid`` is None."""
    from kformer.data.splits import check_label_counts

    if data is None:
        raise BadInput("{field} is required: a labelled file or (texts, labels)", field="data")
    columns = (config.text_column, config.label_column)
    train = as_labelled(data, *columns, "data")
    if len(set(train.labels)) < 2:
        raise BadInput(f"{train.source} has a single label '{train.labels[0]}'; a classifier needs at least two",
                       field="data")
    if len(set(train.labels)) > MAX_LABELS:
        raise BadInput(
            f"{train.source} has {len(set(train.labels)):,} different labels in {len(train):,} rows; kformer classifies "
            f"into at most {MAX_LABELS:,} (its report and confusion matrix grow with the square): check "
            "--label-column, or group rare labels", field="data")
    valid = None if valid is None else as_labelled(valid, *columns, "valid")
    check_unknown_label(config.unknown_label, train, valid)
    if valid is None:
        check_label_counts(train.labels, 2, "a stratified hold-out needs")
    test = None if test is None else as_labelled(test, *columns, "test")
    return train, valid, test


def subset(data: LabelledTexts, rows, source: str, dropped: int = 0) -> LabelledTexts:
    """The ``rows`` (indices) of ``data``, named ``source``."""
    return LabelledTexts([data.texts[i] for i in rows], [data.labels[i] for i in rows], source, dropped)


def split(valid_fraction: float, seed: int, train: LabelledTexts,
          valid: LabelledTexts | None) -> tuple[LabelledTexts, LabelledTexts]:
    """``(train, valid)``: a stratified ``valid_fraction`` hold-out of ``train`` when no ``valid`` is given."""
    from kformer.data.splits import stratified_split

    if valid is None:
        keep, held = stratified_split(train.labels, valid_fraction, seed)
        valid = subset(train, held, f"{train.source} (hold-out)")
        train = subset(train, keep, train.source, train.dropped)
    return train, valid


def split_unknown(config, train: LabelledTexts,
                  valid: LabelledTexts | None) -> tuple[LabelledTexts, LabelledTexts, LabelledTexts | None]:
    """``(train, valid, unknown rows or None)``: :func:`split` of the training rows whose label is not
    ``config.unknown_label``; the rows that are: in training, the unknown rows returned (they train
    the network away from confident answers), and with no ``valid`` given a ``valid_fraction`` of
    them (at least one) held out into the validation split (out-of-scope texts there)."""
    name = config.unknown_label
    outside = [i for i, label in enumerate(train.labels) if label == name]
    if name is None or not outside:
        return (*split(config.valid_fraction, config.seed, train, valid), None)
    inside = [i for i in range(len(train)) if train.labels[i] != name]
    if len({train.labels[i] for i in inside}) < 2:
        raise BadInput(f"{train.source}: beside the {name!r} rows of {{field}} the training data has fewer than two "
                       "labels; a classifier needs at least two", field="unknown_label")
    in_scope, held_valid = split(config.valid_fraction, config.seed, subset(train, inside, train.source, train.dropped),
                                 valid)
    unknown = subset(train, outside, f"{train.source} ({name})")
    if valid is not None:
        return in_scope, held_valid, unknown
    order = np.random.default_rng(config.seed).permutation(len(outside))
    held = max(1, round(config.valid_fraction * len(outside))) if len(outside) > 1 else 0
    held_unknown = subset(unknown, order[:held], unknown.source)
    together = LabelledTexts([*held_valid.texts, *held_unknown.texts], [*held_valid.labels, *held_unknown.labels],
                             held_valid.source)
    return in_scope, together, subset(unknown, order[held:], unknown.source)


def without_label(data: LabelledTexts, name: str) -> LabelledTexts:
    """``data`` without its rows labelled ``name``."""
    return subset(data, [i for i, label in enumerate(data.labels) if label != name], data.source, data.dropped)


def check_unknown_label(name: str | None, train: LabelledTexts, valid: LabelledTexts | None) -> None:
    """BadInput naming ``unknown_label`` when ``name`` labels no row of the training or validation data."""
    if name is not None and name not in train.labels and (valid is None or name not in valid.labels):
        shown = ", ".join(repr(label) for label in sorted(set(train.labels))[:5])
        raise BadInput(f"{{field}} {name!r} labels no row of the training or validation data (training labels: "
                       f"{shown}{', ...' if len(set(train.labels)) > 5 else ''})", field="unknown_label")


def scope_split(labels: list[str], valid: LabelledTexts) -> tuple[LabelledTexts, LabelledTexts | None]:
    """``(in-scope rows, out-of-scope rows or None)`` of ``valid``: out of scope are the rows
    whose label is not among the training ``labels``."""
    known = set(labels)
    inside = [i for i, label in enumerate(valid.labels) if label in known]
    if len(inside) == len(valid):
        return valid, None
    if not inside:
        raise BadInput("{field} holds none of the training labels; calibration needs in-scope validation texts",
                       field="valid")
    outside = [i for i, label in enumerate(valid.labels) if label not in known]
    return subset(valid, inside, valid.source, valid.dropped), subset(valid, outside, f"{valid.source} (out of scope)")


def check_labels(labels: list[str], data: LabelledTexts, field: str, message: str) -> None:
    """BadInput naming ``field`` when ``data`` has labels outside ``labels``; ``message`` holds
    ``{shown}`` where they go."""
    unseen = sorted(set(data.labels) - set(labels))
    if unseen:
        raise BadInput(message.replace("{shown}", ", ".join(repr(u) for u in unseen[:5])), field=field)


def one_hot(labels: Sequence[str], index: dict[str, int]) -> np.ndarray:
    """``(n, classes)`` float32."""
    y = np.zeros((len(labels), len(index)), dtype="float32")
    y[np.arange(len(labels)), [index[label] for label in labels]] = 1.0
    return y


def first_rows(chunks: Iterable[LabelledTexts], limit: int) -> Iterator[LabelledTexts]:
    """The chunks holding the first ``limit`` rows (the last one cut short); reading stops there."""
    for chunk in chunks:
        if limit <= 0:
            return
        yield LabelledTexts(chunk.texts[:limit], chunk.labels[:limit], chunk.source, chunk.dropped)
        limit -= len(chunk)
