"""Pictures: attention heat maps, training curves, confusion matrices (matplotlib, Agg backend)."""


# --- Training curves and confusion matrices (helper A: classify) ----------------------------------


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_training_curves(history: dict, path) -> None:
    """Loss and every other metric per epoch (train solid, validation dashed) as one PNG."""
    plt = _pyplot()
    names = [k for k in history if not k.startswith("val_") and k != "learning_rate"]
    if not names:
        return
    fig, axes = plt.subplots(1, len(names), figsize=(4.5 * len(names), 3.5), squeeze=False)
    for ax, name in zip(axes[0], names, strict=True):
        epochs = range(1, len(history[name]) + 1)
        ax.plot(epochs, history[name], "o-", label="train")
        if f"val_{name}" in history:
            ax.plot(range(1, len(history[f"val_{name}"]) + 1), history[f"val_{name}"], "o--", label="validation")
        ax.set_xlabel("epoch")
        ax.set_title(name)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot_confusion_matrix(confusion, labels, path, max_labels_annotated: int = 20) -> None:
    """Row-normalised confusion matrix (true label per row) with the label names on both axes."""
    import numpy as np

    plt = _pyplot()
    counts = np.asarray(confusion, dtype=float)
    rates = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1.0)
    size = min(4 + 0.3 * len(labels), 30)
    fig, ax = plt.subplots(figsize=(size, size))
    image = ax.imshow(rates, cmap="Blues", vmin=0.0, vmax=1.0)
    ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=8 if len(labels) > 20 else 10)
    ax.set_yticks(range(len(labels)), labels, fontsize=8 if len(labels) > 20 else 10)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    if len(labels) <= max_labels_annotated:
        for i in range(len(labels)):
            for j in range(len(labels)):
                ax.text(j, i, int(counts[i, j]), ha="center", va="center",
                        color="white" if rates[i, j] > 0.5 else "black", fontsize=8)
    fig.colorbar(image, ax=ax, fraction=0.046)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
