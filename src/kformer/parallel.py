"""Data-parallel training on several processes and hosts, on Keras' own distribution engine.

The engine is :class:`keras.distribution.DataParallel` on the JAX backend (CPU collectives
through gloo, GPUs through NCCL): every process holds the whole model, each step's global batch is
split across all devices of all processes, and the gradients are all-reduced, so N processes train
in lockstep exactly as one process would on the same global batch. kformer adds the rules around it:

- :class:`DistributeConfig` says who this process is (``--coordinator HOST:PORT --num-processes N
  --process-id I``, Keras' ``KERAS_DISTRIBUTION_*`` variables, or a Slurm / Open MPI job that JAX
  detects by itself); :func:`start` joins the job before any computation and gives a
  :class:`Cluster`.
- The batch size is *global* and must divide by the number of devices
  (:meth:`Cluster.check_batch_size`).
- Length-bucketed batches cannot be sharded by Keras (their size is unknown to it), so every
  process builds the same global batches from the same seed and keeps its own rows
  (:meth:`Cluster.rows_of`: :class:`ProcessBatches` for classify, :meth:`Cluster.shard` for a
  ``tf.data`` pipeline of global batches (translate), :meth:`Cluster.local` for one generated
  batch (arithmetic)). A global batch is cut to a multiple of the device count (at most
  ``devices - 1`` rows of it are left out); one with fewer rows than devices (a last, partial
  batch) repeats its rows up to the device count instead, so an epoch keeps its number of steps.
- Clocks differ between processes: a time budget's stop decision is process 0's
  (:meth:`Cluster.agree`, a broadcast after every batch), and so is the learning rate of a
  schedule that decays over a time budget (:func:`follow_chief_rate`, a broadcast before every
  batch); a schedule over steps needs none. Checkpoints store the optimizer step, so a resumed
  run continues the schedule in every process.
- Vocabularies are learned in every process from the same data; :meth:`Cluster.check_same`
  refuses a job whose processes disagree (else the ids would mean different words).
- Process 0 writes ``--out``; the others keep their checkpoints in a hidden folder beside it
  (:meth:`Cluster.folder`), so ``--resume`` works on every host, and write no model folder; a
  resumed job first gives every process the newest checkpoint any of them has
  (:meth:`Cluster.take_newest_checkpoint`: one killed mid-write keeps an older one). The
  distribution is set only while the model is built and trained (:meth:`Cluster.scope`); scoring
  and saving the model folder afterwards run without it, in each process on its own.

TensorFlow's ``MultiWorkerMirroredStrategy`` is refused: it fails with Keras 3.15
(keras-team/keras#20585).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kformer.data.batching import BucketedBatches
from kformer.errors import BadInput, Unsupported

ENV_ADDRESSES = "KERAS_DISTRIBUTION_JOB_ADDRESSES"
ENV_PROCESSES = "KERAS_DISTRIBUTION_NUM_PROCESSES"
ENV_PROCESS_ID = "KERAS_DISTRIBUTION_PROCESS_ID"
# environment variables of the cluster managers jax.distributed.initialize() detects by itself
AUTO_DETECTED = {"SLURM_JOB_ID": "Slurm", "OMPI_COMM_WORLD_SIZE": "Open MPI"}
TF_REFUSAL = (
    "--distribute needs the JAX backend (KERAS_BACKEND=jax, or leave KERAS_BACKEND unset and kformer picks it); "
    "TensorFlow's MultiWorkerMirroredStrategy fails with Keras 3.15 (keras-team/keras#20585)"
)
_ADDRESS = re.compile(r"^(?P<host>\[[0-9a-fA-F:.]+\]|[A-Za-z0-9_.\-]+):(?P<port>\d{1,5})$")


@dataclass(frozen=True)
class DistributeConfig:
    """Who this process is in a data-parallel job.

    ``coordinator`` is process 0's ``"HOST:PORT"`` (the same on every host; process 0 listens
    there, on that interface only), ``num_processes`` the number of processes (one per host is
    usual), ``process_id`` this one's number, ``0 .. num_processes - 1``. All three None: the job
    comes from the environment (:meth:`from_env`), or it is this one process on all of this
    machine's devices.
    """

    coordinator: str | None = None
    num_processes: int | None = None
    process_id: int | None = None

    def __post_init__(self):
        given = [self.coordinator is not None, self.num_processes is not None, self.process_id is not None]
        if any(given) and not all(given) and not (self.num_processes == 1 and self.coordinator is None):
            missing = [flag for flag, ok in zip(("coordinator", "num_processes", "process_id"), given, strict=True)
                       if not ok]
            raise BadInput("{field} is missing: a job of several processes needs --coordinator HOST:PORT, "
                           "--num-processes N and --process-id I, the same coordinator on every host",
                           field=missing[0])
        if self.coordinator is not None and not _ADDRESS.match(self.coordinator):
            raise BadInput(f"{{field}} must be HOST:PORT (process 0's address), got {self.coordinator!r}",
                           field="coordinator")
        if self.coordinator is not None and not 0 < int(self.coordinator.rsplit(":", 1)[1]) < 65536:
            raise BadInput(f"{{field}}: port of {self.coordinator!r} must be 1 to 65535", field="coordinator")
        if self.num_processes is not None and self.num_processes < 1:
            raise BadInput(f"{{field}} must be at least 1, got {self.num_processes}", field="num_processes")
        if self.process_id is not None and not 0 <= self.process_id < (self.num_processes or 1):
            raise BadInput(f"{{field}} must be 0 to {(self.num_processes or 1) - 1}, got {self.process_id}",
                           field="process_id")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> DistributeConfig:
        """From Keras' ``KERAS_DISTRIBUTION_JOB_ADDRESSES`` (the first address is the coordinator),
        ``KERAS_DISTRIBUTION_NUM_PROCESSES`` and ``KERAS_DISTRIBUTION_PROCESS_ID``; empty when
        none is set (then Slurm / Open MPI are detected by JAX, or this machine is the job)."""
        environ = os.environ if environ is None else environ
        addresses = environ.get(ENV_ADDRESSES)

        def number(name: str) -> int | None:
            value = environ.get(name)
            if value is None:
                return None
            try:
                return int(value)
            except ValueError:
                raise BadInput(f"environment variable {name}={value!r} must be a whole number") from None

        return cls(addresses.split(",")[0].strip() if addresses else None, number(ENV_PROCESSES), number(ENV_PROCESS_ID))

    @property
    def several_processes(self) -> bool:
        """True when this process must join others (explicitly, or as a Slurm / Open MPI job)."""
        if self.num_processes is not None:
            return self.num_processes > 1
        return any(name in os.environ for name in AUTO_DETECTED)


def check_backend() -> None:
    """Unsupported unless Keras runs on JAX (the only backend whose multi-process training works)."""
    import keras

    if keras.backend.backend() != "jax":
        raise Unsupported(f"{TF_REFUSAL}; this process runs Keras on {keras.backend.backend()}", field="distribute")


@dataclass(frozen=True)
class Cluster:
    """The running job as this process sees it: its ``process_id`` of ``num_processes`` and the
    number of ``devices`` in all processes together (the global batch is split across them)."""

    process_id: int
    num_processes: int
    devices: int

    @property
    def chief(self) -> bool:
        """Process 0: it writes ``--out`` and decides when a time budget is spent."""
        return self.process_id == 0

    def check_batch_size(self, batch_size: int) -> None:
        """BadInput naming ``batch_size`` unless the global batch splits evenly across the devices."""
        if batch_size % self.devices:
            lower = max(batch_size - batch_size % self.devices, self.devices)
            raise BadInput(f"{{field}} {batch_size} is the global batch and must divide by the {self.devices} devices "
                           f"of this job ({self.num_processes} processes): use {lower} or "
                           f"{lower + self.devices}", field="batch_size")

    def folder(self, out: str | os.PathLike) -> Path:
        """Where this process writes: ``out`` for process 0; for process I the hidden folder
        ``.NAME.process-I`` beside ``out`` (its checkpoints, for ``--resume``; no model folder)."""
        out = Path(out)
        return out if self.chief else out.parent / f".{out.name}.process-{self.process_id}"

    def rows_of(self, rows: int) -> np.ndarray:
        """This process's row indices of a global batch of ``rows`` rows.

        The batch is cut to a multiple of :attr:`devices` (or, with fewer rows than devices, its
        rows repeated up to that many) and split evenly over the processes: process ``p`` gets
        ``k = kept / num_processes`` indices ``p * k .. (p + 1) * k`` (modulo ``rows``).
        """
        kept = max(rows - rows % self.devices, self.devices)
        share = kept // self.num_processes
        return np.arange(self.process_id * share, (self.process_id + 1) * share) % rows

    def local(self, batch):
        """This process's rows of one global batch: a nested structure (tuples, dicts) of arrays
        ``(rows, ...)``, all with the same rows, to the same structure of ``(k, ...)`` arrays."""
        import keras

        rows = len(keras.tree.flatten(batch)[0])
        mine = self.rows_of(rows)
        return keras.tree.map_structure(lambda array: np.asarray(array)[mine], batch)

    def shard(self, dataset):
        """A ``tf.data.Dataset`` of global batches (any nested structure of ``(rows, ...)``
        tensors, the same in every process) -> this process's rows of each (:meth:`rows_of`).
        The number of batches stays the same."""
        import tensorflow as tf

        def mine(*batch):
            rows = tf.shape(tf.nest.flatten(batch)[0])[0]
            index = tf.numpy_function(lambda n: self.rows_of(int(n)), [rows], tf.int64, stateful=False)
            picked = tf.nest.map_structure(lambda t: tf.gather(t, index), batch)
            return picked if len(picked) > 1 else picked[0]

        return dataset.map(mine)

    def batches(self, x, y, batch_size: int, **options) -> ProcessBatches:
        """This process's part of the global length-bucketed batches (see :class:`ProcessBatches`)."""
        return ProcessBatches(x, y, batch_size, cluster=self, **options)

    @contextlib.contextmanager
    def scope(self) -> Iterator[None]:
        """Keras' DataParallel over every device of the job while the block runs (build and fit
        the model inside it; score and save outside). A job of one device trains as a plain run
        (DataParallel over one device would only add a recompilation of the step every epoch)."""
        import keras

        if self.devices == 1:
            yield
            return
        distribution = keras.distribution.DataParallel(devices=keras.distribution.list_devices(),
                                                       auto_shard_dataset=False)
        with distribution.scope():
            yield

    def agree(self, decision: bool) -> bool:
        """Process 0's ``decision``, in every process (a collective: every process must call it at
        the same point). One process: ``decision`` itself."""
        if self.num_processes == 1:
            return bool(decision)
        from jax.experimental import multihost_utils

        return bool(multihost_utils.broadcast_one_to_all(np.asarray(bool(decision))))

    def share(self, value: float) -> float:
        """Process 0's ``value`` (float32), in every process (a collective, as :meth:`agree`)."""
        if self.num_processes == 1:
            return float(value)
        from jax.experimental import multihost_utils

        return float(multihost_utils.broadcast_one_to_all(np.asarray(value, dtype="float32")))

    def take_newest_checkpoint(self, state_dir: str | os.PathLike) -> bool:
        """Give every process the newest complete checkpoint of any process (a collective, before a
        resumed run restores it); False when no process has one.

        A process killed while writing a checkpoint keeps the one before, while the others may have
        written theirs: resumed as they are, the processes would start from different epochs. All
        processes hold the same weights and optimizer state after every step, so the newest
        checkpoint (process 0's on a tie) is every process's: its files
        (:func:`~kformer.training.checkpoints.checkpoint_files`, the history with them) are
        broadcast and written in place of each process's own."""
        from kformer.training.checkpoints import (
            checkpoint_files,
            last_checkpoint,
            put_checkpoint_files,
        )

        found = last_checkpoint(state_dir)
        packed = _pack(checkpoint_files(state_dir)) if found is not None else b""
        table = self._gather_ints([-1 if found is None else found[1], len(packed)])  # (process, [epochs, bytes])
        source = int(np.argmax(table[:, 0]))
        if table[source, 0] < 0:
            return False
        received = self._broadcast_bytes(packed, source, int(table[source, 1]))
        if self.process_id != source:
            put_checkpoint_files(state_dir, _unpack(received))
        return True

    def _gather_ints(self, values: list[int]) -> np.ndarray:
        """``values`` of every process, one row per process (a collective)."""
        row = np.asarray(values, dtype="int32")
        if self.num_processes == 1:
            return row[None]
        from jax.experimental import multihost_utils

        return np.asarray(multihost_utils.process_allgather(row)).reshape(self.num_processes, -1)

    def _broadcast_bytes(self, data: bytes, source: int, size: int) -> bytes:
        """Process ``source``'s ``data`` (``size`` bytes) in every process (a collective)."""
        if self.num_processes == 1:
            return data
        from jax.experimental import multihost_utils

        mine = self.process_id == source
        blob = np.frombuffer(data, dtype="uint8") if mine else np.zeros(size, dtype="uint8")
        return np.asarray(multihost_utils.broadcast_one_to_all(blob, is_source=mine), dtype="uint8").tobytes()

    def check_same(self, what: str, data: bytes) -> None:
        """BadInput unless ``data`` (e.g. a learned vocabulary) is the same in every process (a
        collective: every process compares every process's SHA-256 of it)."""
        if self.num_processes == 1:
            return
        import hashlib

        from jax.experimental import multihost_utils

        digest = np.frombuffer(hashlib.sha256(data).digest(), dtype="uint8")
        digests = np.asarray(multihost_utils.process_allgather(digest)).reshape(self.num_processes, -1)
        differ = [i for i in range(self.num_processes) if not np.array_equal(digests[i], digests[0])]
        if differ:
            raise BadInput(f"{what} of process(es) {differ} differs from process 0's: every process must read the "
                           "same data with the same settings", field="data")


def _pack(files: dict[str, bytes]) -> bytes:
    """``{name: bytes}`` as one string of bytes: a 4-byte header length, the header (JSON names and
    sizes), the files (:func:`_unpack` reads it back)."""
    header = json.dumps([[name, len(data)] for name, data in files.items()]).encode()
    return len(header).to_bytes(4, "big") + header + b"".join(files.values())


def _unpack(packed: bytes) -> dict[str, bytes]:
    length = int.from_bytes(packed[:4], "big")
    files, offset = {}, 4 + length
    for name, size in json.loads(packed[4:offset]):
        files[name], offset = packed[offset:offset + size], offset + size
    return files


def follow_chief_rate(cluster: Cluster | None, clocked: bool) -> list:
    """Callbacks to put right after a learning-rate callback (such as
    :func:`kformer.training.budget_schedule`) whose rate reads a clock (``clocked``: it decays
    over a time budget): before every batch every process takes process 0's rate, so all train
    with one rate at every step. Empty for one process or a rate that depends on the step alone."""
    if cluster is None or cluster.num_processes == 1 or not clocked:
        return []
    import keras

    class ChiefRate(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            rate = self.model.optimizer.learning_rate
            rate.assign(cluster.share(float(np.asarray(rate))))

    return [ChiefRate()]


def fit(cluster: Cluster | None, model, train, validation, plan, *, shard: bool = True, callbacks: list | None = None,
        progress=None):
    """:func:`kformer.training.fit` (``plan`` a :class:`~kformer.training.FitPlan`) as one process
    of ``cluster``'s job (plain ``fit`` when None; call it inside :meth:`Cluster.scope`).

    ``train`` and ``validation`` are ``tf.data`` pipelines of *global* batches, the same in every
    process; each process feeds its rows of them (:meth:`Cluster.shard`; ``shard=False``: they
    are this process's rows already). Process 0's clock decides when a time budget ends and what
    a budget-driven learning rate is (``callbacks`` are followed by :func:`follow_chief_rate`).
    """
    from kformer import training

    if cluster is None:
        return training.fit(model, train, validation, plan, callbacks=callbacks, progress=progress)
    if shard:
        train, validation = cluster.shard(train), None if validation is None else cluster.shard(validation)
    callbacks = [*(callbacks or []), *follow_chief_rate(cluster, plan.max_minutes is not None)]
    return training.fit(model, train, validation, plan, callbacks=callbacks, progress=progress, agree=cluster.agree)


_cluster: Cluster | None = None


def start(config: DistributeConfig | None = None) -> Cluster:
    """Join the job ``config`` describes (once per process; later calls return the same cluster).

    Must run before Keras computes anything; the backend must be JAX (else Unsupported). With
    several processes, process 0's coordinator listens on the coordinator's own address
    (``JAX_COORDINATOR_BIND_ADDRESS``, unless already set), not on every interface, CPU
    collectives go through gloo, and SIGTERM ends the process (JAX's preemption service is off).
    It waits until every process has joined.
    """
    global _cluster
    if _cluster is not None:
        return _cluster
    check_backend()
    import jax
    import keras

    config = config or DistributeConfig.from_env()
    if config.several_processes:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        # JAX's preemption service catches SIGTERM (for sync points kformer does not use): without it
        # SIGTERM ends a process at once, as it ends a single-process run, so a job stops promptly
        with contextlib.suppress(AttributeError, KeyError, ValueError):
            jax.config.update("jax_enable_preemption_service", False)
        if config.coordinator is not None:
            os.environ.setdefault("JAX_COORDINATOR_BIND_ADDRESS", config.coordinator)
        keras.distribution.initialize(config.coordinator, config.num_processes, config.process_id)
    _cluster = Cluster(jax.process_index(), jax.process_count(), len(keras.distribution.list_devices()))
    return _cluster


class ProcessBatches(BucketedBatches):
    """This process's rows of the global length-bucketed batches of :class:`BucketedBatches`.

    Every process arranges the same global batches (same rows, seed and epoch) and keeps its rows
    of each (:meth:`Cluster.rows_of`: cut to a multiple of ``cluster.devices``, process ``p`` the
    ``p``-th share), padded to the *global* batch's width so that all processes feed one shape.
    ``batches[i]`` is ``(x (k, width), y)`` or ``(x, y, sample_weight)``, as in
    :class:`BucketedBatches`; there are as many as in one process.
    """

    def __init__(self, x, y, batch_size: int = 32, *, cluster: Cluster, **options):
        self.cluster = cluster
        super().__init__(x, y, batch_size, **options)

    def __getitem__(self, index):
        rows = self.batches[index]
        width = self.width(rows)
        mine = rows[self.cluster.rows_of(len(rows))]
        x = self.x[mine, :width]
        if self.sample_weight is None:
            return x, self.y[mine]
        return x, self.y[mine], self.sample_weight[mine]
