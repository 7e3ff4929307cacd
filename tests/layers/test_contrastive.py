"""The supervised contrastive loss (``kformer.layers.contrastive``): its value against a NumPy
reference written from Khosla et al. 2020's "L_out" formula, and what one training step does."""

import keras
import numpy as np
from layer_helpers import numpy

from kformer.layers import SupervisedContrastive, supervised_contrastive_loss

# two texts of class 0, one of class 1 (no positive: no anchor), one "none of these" row, one absent
VECTORS = np.array([[1.0, 0.2, 0.0], [0.6, 0.9, 0.1], [0.0, 1.0, 0.5], [0.3, -0.4, 1.0], [5.0, 5.0, 5.0]], "float32")
TARGETS = np.array([[1, 0], [1, 0], [0, 1], [0.5, 0.5], [0, 0]], "float32")


def _reference(vectors, targets, temperature):
    """SupCon L_out written out row by row: anchors are class rows with a positive; the
    denominator holds every present row but the anchor."""
    z = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    present = [i for i in range(len(z)) if targets[i].sum() > 0]
    label = {i: int(targets[i].argmax()) for i in present if targets[i].max() == 1}
    losses = []
    for i in label:
        positives = [p for p in label if p != i and label[p] == label[i]]
        if not positives:
            continue
        denominator = sum(np.exp(z[i] @ z[a] / temperature) for a in present if a != i)
        losses.append(-np.mean([np.log(np.exp(z[i] @ z[p] / temperature) / denominator) for p in positives]))
    return float(np.mean(losses))


def test_the_loss_matches_the_formula_leaving_out_rows_of_no_class_and_absent_rows():
    for temperature in (0.1, 0.5):
        got = float(numpy(supervised_contrastive_loss(VECTORS, TARGETS, temperature)))
        assert abs(got - _reference(VECTORS, TARGETS, temperature)) < 1e-5
    alone = np.array([[1, 0], [0, 1], [0.5, 0.5], [0, 0], [0, 0]], "float32")  # no class has two texts
    assert float(numpy(supervised_contrastive_loss(VECTORS, alone, 0.1))) == 0.0  # no anchor: nothing to pull
    # the "none of these" row sits in the denominators: moving it changes the loss; the absent row does not
    moved = VECTORS.copy()
    moved[3], moved[4] = VECTORS[0], -VECTORS[4]
    assert float(numpy(supervised_contrastive_loss(moved, TARGETS, 0.1))) > float(numpy(supervised_contrastive_loss(VECTORS, TARGETS, 0.1)))
    moved = VECTORS.copy()
    moved[4] = VECTORS[0]
    assert np.isclose(float(numpy(supervised_contrastive_loss(moved, TARGETS, 0.1))), _reference(VECTORS, TARGETS, 0.1), atol=1e-5)


def test_a_training_step_pulls_a_class_together_and_only_in_training():
    """Free vectors (an embedding table) trained by the layer's added loss alone: one SGD step
    brings the two class-0 vectors closer; evaluation adds nothing."""
    keras.utils.set_random_seed(0)
    rows = keras.Input((), dtype="int32", name="rows")
    targets = keras.Input((2,), name="targets")
    table = keras.layers.Embedding(4, 3, name="vectors")
    vectors = table(rows)
    model = keras.Model({"rows": rows, "targets": targets},
                        SupervisedContrastive(1.0, 0.5)([vectors, vectors, targets]))
    model.compile(optimizer=keras.optimizers.SGD(0.5))
    model.build({"rows": (None,), "targets": (None, 2)})
    table.embeddings.assign(VECTORS[:4])
    x = {"rows": np.arange(4, dtype="int32"), "targets": TARGETS[:4]}

    def gap():
        z = numpy(table.embeddings)
        z = z / np.linalg.norm(z, axis=1, keepdims=True)
        return float(np.linalg.norm(z[0] - z[1]))

    before = gap()
    model(x, training=False)
    assert not model.losses
    model(x, training=True)
    assert len(model.losses) == 1
    model.fit(x, batch_size=4, epochs=1, verbose=0)
    assert gap() < before
    assert SupervisedContrastive.from_config(SupervisedContrastive(0.3, 0.2).get_config()).temperature == 0.2
