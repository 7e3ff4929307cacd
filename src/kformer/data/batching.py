"""Length-bucketed batching: one rule for every task, in training and in prediction.

Rows of similar length go into one batch, and each batch is padded (with id 0, at the end) only to
its longest row rounded up to a *width bucket*: 8, 16, 24, 32, 48, 64, 96, 128, 192, 256, ... (two
steps per doubling). So a batch of short texts costs a short sequence, and a compiled step
function sees only a handful of distinct shapes.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

CHUNK_BATCHES = 64  # training: rows are sorted by length within chunks of this many batches
BATCH_BUCKETS = (1, 4, 16, 64)  # prediction and decoding batches are padded to one of these sizes


def _width_ladder():
    """8, 16, 24, 32, 48, 64, 96, 128, ...: each power of two from 16 on, and 1.5 times it."""
    yield 8
    width = 16
    while True:
        yield width
        yield width * 3 // 2
        width *= 2


def bucket_width(longest: int, limit: int | None = None) -> int:
    """The smallest width bucket that holds ``longest`` tokens, but not past ``limit`` (the
    model's longest sequence; ``longest`` itself must fit it)."""
    width = next(w for w in _width_ladder() if w >= longest)
    if limit is not None:
        width = max(min(width, int(limit)), int(longest))
    return width


def batch_bucket(rows: int) -> int:
    """The size a prediction batch of ``rows`` is padded to: the smallest of :data:`BATCH_BUCKETS`
    that holds it (a multiple of the largest beyond it), so compiled functions see few shapes."""
    largest = BATCH_BUCKETS[-1]
    return next((size for size in BATCH_BUCKETS if size >= rows), -(-rows // largest) * largest)


def pad_rows(x: np.ndarray, rows: int) -> np.ndarray:
    """``x`` ``(n, ...)`` with copies of its first row appended up to ``rows`` rows."""
    if len(x) >= rows:
        return x
    return np.concatenate([x, np.repeat(x[:1], rows - len(x), axis=0)])


def length_bucketed_batches(
    lengths: Sequence[int], batch_size: int, rng: np.random.Generator | None = None
) -> list[np.ndarray]:
    """Index batches of similar-length rows covering every row once.

    Without ``rng`` (prediction) rows are sorted by length and cut in order. With ``rng``
    (training) rows are shuffled, sorted by length within chunks of :data:`CHUNK_BATCHES`
    batches, cut, and the batches shuffled: similar lengths together, a new mix every epoch.
    """
    lengths = np.asarray(lengths)
    batch_size = int(batch_size)
    if rng is None:
        order = np.argsort(lengths, kind="stable")
        return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    order = rng.permutation(len(lengths))
    chunk = batch_size * CHUNK_BATCHES
    batches = []
    for start in range(0, len(order), chunk):
        part = order[start : start + chunk]
        part = part[np.argsort(lengths[part], kind="stable")]
        batches += [part[i : i + batch_size] for i in range(0, len(part), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def class_grouped_batches(lengths: Sequence[int], classes: Sequence[int], batch_size: int, per_class: int,
                          rng: np.random.Generator) -> list[np.ndarray]:
    """Index batches (training) in which a class's rows come ``per_class`` at a time, so a batch of
    ``batch_size`` holds about ``batch_size / per_class`` classes with ``per_class`` rows each
    (what a supervised contrastive loss needs: positives in every batch). Each class's rows
    (``classes`` ``(n,)`` int; -1, no class, is one more group) are shuffled and cut into runs of
    ``per_class``; the runs are shuffled, sorted by their longest row within chunks of
    :data:`CHUNK_BATCHES` batches' worth, packed whole into batches (a batch closes when the next
    run does not fit, so it may be a few rows short; the fullest are split so that every epoch has
    the same number of batches, which Keras requires), and the batches shuffled. Every row once;
    a run's rows have any lengths, so batches pad wider than :func:`length_bucketed_batches`'."""
    lengths, classes = np.asarray(lengths), np.asarray(classes)
    per_class = max(1, min(int(per_class), int(batch_size)))  # a run never outgrows a batch
    runs = []
    for label in np.unique(classes):
        rows = rng.permutation(np.flatnonzero(classes == label))
        runs += [rows[i : i + per_class] for i in range(0, len(rows), per_class)]
    order, chunk = rng.permutation(len(runs)), max(1, CHUNK_BATCHES * int(batch_size) // per_class)
    for start in range(0, len(order), chunk):
        part = order[start : start + chunk]
        order[start : start + chunk] = part[np.argsort([lengths[runs[i]].max() for i in part], kind="stable")]
    packed, batch, size = [], [], 0
    for i in order:
        if batch and size + len(runs[i]) > batch_size:
            packed.append(batch)
            batch, size = [], 0
        batch, size = batch + [runs[i]], size + len(runs[i])
    packed += [batch] if batch else []
    # Keras fixes an epoch's steps from the first epoch, so every epoch must have as many batches: as
    # many as the worst packing could need (a closed batch holds more than batch_size - per_class rows)
    wanted = min(-(-len(lengths) // (int(batch_size) - per_class + 1)), len(runs))
    while len(packed) < wanted:  # split the batch of most runs in two, runs kept whole
        widest = max(range(len(packed)), key=lambda b: len(packed[b]))
        runs_in = packed.pop(widest)
        packed += [runs_in[: len(runs_in) // 2], runs_in[len(runs_in) // 2 :]]
    batches = [np.concatenate(batch) for batch in packed]
    return [batches[i] for i in rng.permutation(len(batches))]


def token_budget_batches(
    lengths: Sequence[int], batch_tokens: int, rng: np.random.Generator | None = None
) -> list[np.ndarray]:
    """Index batches of similar-length rows, each padded to at most ``batch_tokens`` tokens.

    Rows are sorted by length (ties in random order with ``rng``) and grouped by their
    :func:`bucket_width`; each group is cut into batches of ``batch_tokens // width`` rows (at
    least 1), the size the batch has once :func:`pad_batch` pads it. So short sentences come many
    to a batch and long ones few, every batch costs about the same, and every row appears once.
    Each width has one batch shape plus at most one smaller remainder, so a compiled training
    step sees few shapes; the cut depends only on the lengths, so the number of batches (and
    their shapes) is the same every epoch. With ``rng`` the batches are then shuffled.
    """
    lengths = np.asarray(lengths)
    ties = np.arange(len(lengths)) if rng is None else rng.permutation(len(lengths))
    order = ties[np.argsort(lengths[ties], kind="stable")]
    widths = np.array([bucket_width(max(int(n), 1)) for n in lengths[order]], dtype=np.int64)
    batches = []
    for width in np.unique(widths):
        group = order[widths == width]
        rows = max(1, int(batch_tokens) // int(width))
        batches += [group[i : i + rows] for i in range(0, len(group), rows)]
    if rng is None:
        return batches
    return [batches[i] for i in rng.permutation(len(batches))]


def pad_batch(sequences: Sequence[Sequence[int]], limit: int | None = None) -> np.ndarray:
    """``(batch, width)`` int32, 0-padded to the longest row's :func:`bucket_width`."""
    longest = max((len(s) for s in sequences), default=1)
    out = np.zeros((len(sequences), bucket_width(longest, limit)), dtype="int32")
    for row, seq in enumerate(sequences):
        out[row, : len(seq)] = seq
    return out


def fill_batch(batch, rows: int):
    """A ``tf.data`` batch ``(x (n, width), y (n, ...)[, sample_weight (n,)])`` with ``n <= rows``
    filled up to ``rows`` rows with copies of its own rows weighted 0: ``(x (rows, width),
    y (rows, ...), sample_weight (rows,))``. A step compiled per shape (XLA) then meets one batch
    size. The copies are real texts (an all-padding row would make a mean-pooled vector 0/0); the
    real rows' weights are scaled by ``rows / n``, so the batch's loss (Keras divides the weighted
    sum by the batch size) is still the mean over its real rows."""
    import tensorflow as tf  # input pipeline only, outside the model

    x, y, *weight = batch
    n = tf.shape(x)[0]
    take = tf.range(rows) % n
    weight = weight[0] if weight else tf.ones((n,), tf.float32)
    kept = tf.cast(tf.range(rows) < n, tf.float32) * tf.cast(rows, tf.float32) / tf.cast(n, tf.float32)
    return tf.gather(x, take), tf.gather(y, take), tf.gather(weight, take) * kept


class BucketedBatches:
    """Length-bucketed batches of a padded id matrix, for ``model.fit`` and prediction.

    ``x`` is ``(n, max_length)`` int ids padded with 0 at the end; ``y`` (and optional
    ``sample_weight``) are indexed alongside. ``batches[i]`` is ``(x (batch, width), y)`` or
    ``(x, y, sample_weight)``, ``width`` the batch's :func:`bucket_width` (at most
    ``max_length``). With ``shuffle`` the rows are re-arranged every epoch
    (:func:`length_bucketed_batches`), epoch ``e`` by the seed ``seed + e``, so a run resumed at
    ``first_epoch`` sees the order an uninterrupted run would; :meth:`dataset` gives a
    ``tf.data.Dataset`` of them. With ``classes`` ``(n,)`` int and ``per_class`` > 1, shuffled
    batches hold each class's rows ``per_class`` at a time instead (:func:`class_grouped_batches`).
    """

    def __init__(self, x, y, batch_size: int = 32, shuffle: bool = True, seed: int = 0, sample_weight=None,
                 first_epoch: int = 0, classes=None, per_class: int = 0):
        self.classes, self.per_class = classes, int(per_class)
        self.x, self.y = np.asarray(x), np.asarray(y)
        self.sample_weight = None if sample_weight is None else np.asarray(sample_weight, dtype="float32")
        self.lengths = (self.x != 0).sum(axis=1)
        self.batch_size, self.shuffle, self.seed = int(batch_size), shuffle, int(seed)
        self.epoch = int(first_epoch)
        self._arrange()

    def _arrange(self) -> None:
        rng = np.random.default_rng(self.seed + self.epoch) if self.shuffle else None
        if rng is not None and self.classes is not None and self.per_class > 1:
            self.batches = class_grouped_batches(self.lengths, self.classes, self.batch_size, self.per_class, rng)
        else:
            self.batches = length_bucketed_batches(self.lengths, self.batch_size, rng)

    def width(self, rows) -> int:
        return bucket_width(max(int(self.lengths[rows].max()), 1), self.x.shape[1])

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, index):
        rows = self.batches[index]
        x = self.x[rows, : self.width(rows)]
        if self.sample_weight is None:
            return x, self.y[rows]
        return x, self.y[rows], self.sample_weight[rows]

    def _generate(self):
        for index in range(len(self)):
            yield self[index]
        self.epoch += 1
        if self.shuffle:
            self._arrange()

    def dataset(self):
        """The batches as a ``tf.data.Dataset`` (any width; rows re-arranged each epoch)."""
        import tensorflow as tf  # input pipeline only, outside the model

        signature = [
            tf.TensorSpec((None, None), tf.as_dtype(self.x.dtype)),
            tf.TensorSpec((None, *self.y.shape[1:]), tf.as_dtype(self.y.dtype)),
        ]
        if self.sample_weight is not None:
            signature.append(tf.TensorSpec((None,), tf.float32))
        data = tf.data.Dataset.from_generator(self._generate, output_signature=tuple(signature))
        return data.apply(tf.data.experimental.assert_cardinality(len(self))).prefetch(2)
