"""Pictures: attention heat maps, training curves, confusion matrices (matplotlib, Agg backend)."""

import functools

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


def plot_accuracy_by_length(series: dict, path, trained_digits: int | None = None) -> None:
    """Exact match against operand length, one line per ``series`` entry (``{name: {"7":
    {"exact_match": ..., "n": ...}, ...}}``; lengths without problems are skipped), with the
    longest training length marked."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.8))
    for name, by_length in series.items():
        points = sorted((int(k), v["exact_match"]) for k, v in by_length.items() if v.get("exact_match") is not None)
        ax.plot([p[0] for p in points], [100 * p[1] for p in points], "o-", markersize=3, label=name)
    if trained_digits:
        ax.axvline(trained_digits + 0.5, color="grey", linestyle="--", linewidth=1)
        ax.text(trained_digits + 0.7, 3, "longer than any training problem", fontsize=8, color="grey")
    ax.set_xlabel("digits per operand")
    ax.set_ylabel("exact match (%)")
    ax.set_ylim(-2, 102)
    ax.legend(fontsize=8)
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


# --- Attention maps (helper B: seq2seq; also used for classifiers' encoder maps) -------------------


def plot_attention(maps, row_tokens, col_tokens, out_dir, prefix: str = "") -> list:
    """Draw attention heat maps with token labels on both axes; return the PNG paths written.

    Args:
        maps: ``{name: array (layers, heads, Lq, Lk)}``, e.g. ``{"encoder": ...}`` or
            ``{"encoder": ..., "decoder_self": ..., "cross": ...}``.
        row_tokens, col_tokens: the query (row) and key (column) token labels: one list for every
            map, or ``{name: list}`` per map. Lists longer or shorter than the map are cut/padded.
        out_dir: folder for the PNGs (created).
        prefix: put in front of every file name.

    Writes, per map: ``{prefix}{name}_layer{i}.png`` (head-averaged map of layer i) and
    ``{prefix}{name}_grid.png`` (every layer x head).
    """
    from pathlib import Path

    import numpy as np

    plt = _pyplot()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, stack in maps.items():
        stack = np.asarray(stack, dtype="float32")
        if stack.ndim != 4:
            raise ValueError(f"attention map '{name}' must be (layers, heads, Lq, Lk), got shape {stack.shape}")
        rows = _labels(row_tokens, name, stack.shape[2])
        cols = _labels(col_tokens, name, stack.shape[3])
        families = label_fonts([*rows, *cols])
        with plt.rc_context({"font.family": families} if families else {}):
            written += _plot_map(plt, name, stack, rows, cols, out_dir, prefix)
    return written


def _plot_map(plt, name: str, stack, rows: list[str], cols: list[str], out_dir, prefix: str) -> list:
    """One map's PNGs (:func:`plot_attention`); ``stack`` (layers, heads, Lq, Lk)."""
    written = []
    layers, heads, queries, keys = stack.shape
    title = name.replace("_", " ")
    for layer in range(layers):
        fig, ax = plt.subplots(figsize=(1.2 + 0.35 * keys, 1.0 + 0.35 * queries))
        _heat(ax, stack[layer].mean(axis=0), rows, cols)
        ax.set_title(f"{title}: layer {layer + 1}, mean of {heads} heads", fontsize=9)
        written.append(_save(plt, fig, out_dir / f"{prefix}{name}_layer{layer + 1}.png"))
    cell_w, cell_h = 0.8 + 0.28 * keys, 0.8 + 0.28 * queries
    # + 0.8 in for the figure's title (a one-token map's grid had no room left for it)
    fig, axes = plt.subplots(layers, heads, figsize=(cell_w * heads, cell_h * layers + 0.8), squeeze=False)
    for layer in range(layers):
        for head in range(heads):
            ax = axes[layer][head]
            _heat(ax, stack[layer, head], rows, cols, fontsize=6)
            ax.set_title(f"layer {layer + 1} head {head + 1}", fontsize=7)
    fig.suptitle(f"{title} attention (rows attend to columns)", fontsize=9)
    written.append(_save(plt, fig, out_dir / f"{prefix}{name}_grid.png"))
    return written


def label_fonts(labels: list[str]) -> list[str] | None:
    """Font families for drawing ``labels``: matplotlib's default font and, when it lacks some of
    their characters (Tamil, Devanagari, CJK...), the first installed font that has them all
    (matplotlib falls back to it glyph by glyph); None when the default has every character or no
    installed font has the rest (matplotlib then draws boxes and warns, as it would anyway)."""
    from matplotlib import font_manager

    default = font_manager.findfont(font_manager.FontProperties())
    missing = frozenset(c for label in labels for c in label if not c.isspace()) - _characters(default)
    found = _font_with(missing) if missing else None
    if found is None:
        return None
    font_manager.fontManager.addfont(found)  # a font installed after matplotlib built its font list
    return [font_manager.FontProperties(fname=default).get_name(), font_manager.FontProperties(fname=found).get_name()]


@functools.cache
def _characters(path: str) -> frozenset[str]:
    """The characters the font file at ``path`` has glyphs for (empty if it cannot be read)."""
    from matplotlib.ft2font import FT2Font

    try:
        return frozenset(chr(code) for code in FT2Font(path).get_charmap())
    except (OSError, RuntimeError, ValueError):
        return frozenset()


@functools.cache
def _font_with(characters: frozenset[str]) -> str | None:
    """The first installed font file (the system's font folders) with every one of ``characters``."""
    from matplotlib import font_manager

    return next((path for path in sorted(font_manager.findSystemFonts()) if characters <= _characters(path)), None)


def _save(plt, fig, path):
    _layout_with_titles_inside(fig)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _layout_with_titles_inside(fig, tries: int = 3) -> None:
    """``tight_layout``, widening ``fig`` until every title lies inside it (a map two or three keys
    wide is narrower than its title, which tight_layout then leaves cut at the edges)."""
    for _ in range(tries):
        fig.tight_layout()
        renderer = fig.canvas.get_renderer()
        titles = [t for t in [*fig.texts, *(ax.title for ax in fig.axes)] if t.get_text()]
        boxes = [t.get_window_extent(renderer) for t in titles]
        overflow = max([0.0, *(-b.x0 for b in boxes), *(b.x1 - fig.bbox.width for b in boxes)])
        if overflow <= 0:
            return
        fig.set_figwidth(fig.get_figwidth() + (2 * overflow + 10) / fig.dpi)


def _labels(tokens, name, length):
    tokens = tokens.get(name, []) if isinstance(tokens, dict) else tokens
    tokens = [str(t) for t in list(tokens)[:length]]
    return tokens + [""] * (length - len(tokens))


def _heat(ax, weights, rows, cols, fontsize=8):
    ax.imshow(weights, cmap="viridis", vmin=0.0, vmax=max(float(weights.max()), 1e-6), aspect="auto")
    ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize=fontsize)
    ax.set_yticks(range(len(rows)), rows, fontsize=fontsize)
