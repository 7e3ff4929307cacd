"""kformer.training: the warmup/decay schedule, time budget, atomic checkpoints, resume."""

from __future__ import annotations

import json
import time

import keras
import numpy as np
import pytest

from kformer.training import (
    CHECKPOINT_NAME,
    FitPlan,
    TimeBudget,
    WarmupDecay,
    budget_schedule,
    fit,
    last_checkpoint,
    set_seed,
)


def _tiny_model(learning_rate=None) -> keras.Model:
    """``learning_rate`` None: a WarmupDecay schedule; a float: a rate a callback may set."""
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])
    rate = WarmupDecay(1e-2, 2, 20) if learning_rate is None else learning_rate
    model.compile(optimizer=keras.optimizers.Adam(rate), loss="sparse_categorical_crossentropy")
    return model


def _data(n: int = 64):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(n, 4)).astype("float32")
    return x, (x[:, 0] > 0).astype("int32")


@pytest.mark.parametrize(
    ("decay", "step", "expected"),
    [
        ("cosine", 0, 0.1),
        ("cosine", 4, 0.5),
        ("cosine", 10, 1.0),
        ("cosine", 60, 0.5),
        ("cosine", 110, 0.0),
        ("cosine", 500, 0.0),
        ("linear", 60, 0.5),
        ("linear", 85, 0.25),
    ],
)
def test_warmup_decay_values(decay, step, expected):
    schedule = WarmupDecay(1.0, warmup_steps=10, total_steps=110, decay=decay)
    assert float(schedule(step)) == pytest.approx(expected, abs=1e-5)


def test_warmup_decay_floor_and_serialization():
    schedule = WarmupDecay(2.0, warmup_steps=0, total_steps=10, decay="linear", final_ratio=0.1)
    assert float(schedule(10)) == pytest.approx(0.2, abs=1e-6)
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
    assert isinstance(restored, WarmupDecay)
    assert float(restored(5)) == pytest.approx(float(schedule(5)))


class _Slow(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        time.sleep(0.02)


@pytest.mark.slow
def test_time_budget_stops_training(tmp_path):
    set_seed(0)
    x, y = _data()
    model = _tiny_model()
    result = fit(model, (x, y), None, FitPlan(epochs=500, out_dir=tmp_path, patience=None, max_minutes=0.3 / 60), callbacks=[_Slow()])
    # Fits would take 500 epochs * 2 batches * 20 ms = 20 s without the budget.
    assert result.stopped_by_budget
    assert result.epochs_run < 50
    assert result.seconds < 15  # the 0.3 s budget plus building the step: room for a machine 3x slower


class _SlowValidation(keras.callbacks.Callback):
    """Validation batches take 2.5 s each; counts the training batches run."""

    trained = 0

    def on_train_batch_end(self, batch, logs=None):
        self.trained += 1

    def on_test_batch_end(self, batch, logs=None):
        time.sleep(2.5)


@pytest.mark.slow
def test_time_budget_spent_in_validation_starts_no_new_epoch(tmp_path):
    set_seed(0)
    x, y = _data()
    slow = _SlowValidation()
    # the first epoch's 2 batches end inside the 4 s budget, its validation (2 batches, 5 s) outside
    result = fit(_tiny_model(), (x, y), (x[:48], y[:48]), FitPlan(epochs=50, out_dir=tmp_path, patience=None, max_minutes=4 / 60), callbacks=[slow])
    assert result.stopped_by_budget and result.epochs_run == 1 and slow.trained == 2  # no batch of epoch 2


@pytest.mark.slow
def test_time_budget_not_fired_without_limit():
    budget = TimeBudget(None)
    model = _tiny_model()
    x, y = _data()
    model.fit(x, y, epochs=1, callbacks=[budget])
    assert not budget.fired


@pytest.mark.slow
def test_checkpoint_atomic_and_resume_continues(tmp_path):
    set_seed(1)
    x, y = _data()
    model = _tiny_model()
    first = fit(model, (x[:48], y[:48]), (x[48:], y[48:]), FitPlan(epochs=2, out_dir=tmp_path, patience=None))
    assert first.epochs_run == 2 and not first.stopped_by_budget
    path, done = last_checkpoint(tmp_path)
    assert path.name == CHECKPOINT_NAME and done == 2
    assert not [p.name for p in tmp_path.iterdir() if ".tmp" in p.name]
    assert json.loads((tmp_path / "checkpoint.json").read_text())["epochs_done"] == 2
    assert (tmp_path / "history.csv").is_file() and (tmp_path / "logs").is_dir()
    steps_per_epoch = 2  # 48 rows, batch 32

    resumed = _tiny_model()
    second = fit(resumed, (x[:48], y[:48]), (x[48:], y[48:]), FitPlan(epochs=3, out_dir=tmp_path, patience=None, resume=True))
    assert second.initial_epoch == 2 and second.epochs_run == 1
    assert int(resumed.optimizer.iterations) == 3 * steps_per_epoch
    assert last_checkpoint(tmp_path)[1] == 3


class _Rates(keras.callbacks.Callback):
    """The learning rate each batch trained with."""

    def __init__(self):
        super().__init__()
        self.rates = []

    def on_train_batch_end(self, batch, logs=None):
        self.rates.append(float(np.asarray(self.model.optimizer.learning_rate)))


@pytest.mark.slow
def test_resumed_time_budget_and_its_decay_continue_the_interrupted_runs_clock(tmp_path):
    set_seed(2)
    x, y = _data()
    model = _tiny_model(learning_rate=1e-2)
    first = fit(model, (x, y), None, FitPlan(epochs=2, out_dir=tmp_path, patience=None, max_minutes=10), callbacks=[_Slow()])
    recorded = json.loads((tmp_path / "checkpoint.json").read_text())["train_seconds"]
    assert 0.04 <= recorded <= first.seconds + 0.5  # 2 epochs x 2 batches x 20 ms at least
    # The interrupted run had used 75 % of a 40 s budget: the clock's decay resumes at 75 %, not at 0.
    state = json.loads((tmp_path / "checkpoint.json").read_text())
    (tmp_path / "checkpoint.json").write_text(json.dumps({**state, "train_seconds": 30.0}))
    resumed = _tiny_model(learning_rate=0.0)  # a variable the schedule sets before every batch
    schedule, rates = budget_schedule(1.0, 0, 10**6, 40.0, final_ratio=0.0, decay="linear"), _Rates()
    second = fit(resumed, (x, y), None, FitPlan(epochs=3, out_dir=tmp_path, patience=None, max_minutes=40 / 60, resume=True), callbacks=[schedule, rates])
    assert second.initial_epoch == 2 and not second.stopped_by_budget
    assert 0.0 < rates.rates[-1] <= 0.26  # linear decay at >= 75 % of the budget: at most a quarter of the peak
    assert json.loads((tmp_path / "checkpoint.json").read_text())["train_seconds"] >= 30.0
    # A budget already spent stops the resumed run after its first batch.
    third = fit(_tiny_model(learning_rate=1e-2), (x, y), None, FitPlan(epochs=10, out_dir=tmp_path, patience=None, max_minutes=0.5, resume=True))
    assert third.stopped_by_budget and third.epochs_run == 1


@pytest.mark.slow
def test_failed_checkpoint_keeps_previous(tmp_path, monkeypatch):
    x, y = _data()
    model = _tiny_model()
    fit(model, (x, y), None, FitPlan(epochs=1, out_dir=tmp_path, patience=None))
    before = (tmp_path / CHECKPOINT_NAME).read_bytes()

    def broken_save(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(keras.Model, "save", broken_save)
    with pytest.raises(OSError):
        fit(model, (x, y), None, FitPlan(epochs=2, out_dir=tmp_path, patience=None))
    assert (tmp_path / CHECKPOINT_NAME).read_bytes() == before
    assert last_checkpoint(tmp_path)[1] == 1
    assert not [p.name for p in tmp_path.iterdir() if ".tmp" in p.name]


def test_bucketed_batches_cover_every_row_with_short_widths():
    from kformer.data.batching import BucketedBatches

    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 65, size=100)
    x = np.zeros((100, 64), dtype="int32")
    for row, length in enumerate(lengths):
        x[row, :length] = rng.integers(4, 50, size=length)
    y = np.arange(100)
    batches = BucketedBatches(x, y, batch_size=8, seed=1, sample_weight=y * 2.0)
    for _ in range(2):  # two epochs, re-arranged in between
        seen = []
        for xb, yb, wb in batches.dataset().as_numpy_iterator():
            assert xb.shape[1] % 8 == 0 and xb.shape[1] >= lengths[yb].max()
            assert (xb == x[yb, : xb.shape[1]]).all() and (wb == yb * 2.0).all()
            seen += yb.tolist()
        assert sorted(seen) == list(range(100))
    widths = {batches[i][0].shape[1] for i in range(len(batches))}
    assert len(widths) > 1 and max(widths) <= 64


def test_best_epoch_maximises_a_custom_metric_and_minimises_a_loss():
    from kformer.metrics import MaskedAccuracy
    from kformer.training import BestEpoch

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(loss="mse", metrics=[MaskedAccuracy(name="accuracy")])  # no direction Keras knows
    for monitor, values, best in [("val_accuracy", [0.2, 0.3, 0.25], 1), ("val_loss", [0.9, 0.7, 0.8], 1),
                                  ("val_accuracy", [0.3, 0.2, 0.1], 0)]:
        stopper = BestEpoch(monitor=monitor, patience=10)
        stopper.set_model(model)
        stopper.on_train_begin()
        for epoch, value in enumerate(values):
            stopper.on_epoch_end(epoch, {"val_loss": 1.0, monitor: value})
        assert stopper.best_epoch == best, (monitor, values)


def test_best_epoch_breaks_near_ties_by_validation_loss_without_lowering_the_bar():
    from kformer.training import BestEpoch

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    stopper = BestEpoch(monitor="val_macro_f1", mode="max", patience=10, restore_best_weights=True)
    stopper.set_model(model)
    stopper.on_train_begin()
    history = [(0.9000, 1.10), (0.9101, 1.05), (0.9096, 1.03), (0.9093, 1.04), (0.9085, 0.90), (0.9099, 1.02)]
    chosen = []
    for epoch, (f1, loss) in enumerate(history):
        stopper.on_epoch_end(epoch, {"val_macro_f1": f1, "val_loss": loss})
        chosen.append(stopper.best_epoch)
    # 2: within 0.001 of the best and a lower loss; 3: within but higher loss; 4: lower loss but
    # 0.0016 under the bar, which stays at 0.9101 (not 0.9096); 5: within it and lower loss again
    assert chosen == [0, 1, 2, 2, 2, 5]
    assert stopper.best == pytest.approx(0.9101)
    exact = BestEpoch(monitor="val_macro_f1", mode="max", tie_tolerance=0.0, patience=10)
    exact.set_model(model)
    exact.on_train_begin()
    for epoch, (f1, loss) in enumerate(history):
        exact.on_epoch_end(epoch, {"val_macro_f1": f1, "val_loss": loss})
    assert exact.best_epoch == 1
