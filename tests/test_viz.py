"""Attention pictures (:func:`kformer.viz.plot_attention`): one PNG per layer and a grid per map,
drawn without matplotlib's layout warnings at any size, a one-token map included."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from kformer.viz import plot_attention


@pytest.mark.parametrize(("layers", "heads", "queries", "keys"), [(1, 2, 1, 1), (1, 1, 1, 3), (2, 4, 1, 1), (2, 2, 12, 9)])
def test_maps_of_any_size_draw_every_layer_and_a_grid_without_a_warning(tmp_path, layers, heads, queries, keys):
    maps = {"decoder_self": np.full((layers, heads, queries, keys), 1.0 / keys, "float32")}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Tight layout not applied": a title cut off
        written = plot_attention(maps, ["[START]"] * queries, ["[START]"] * keys, tmp_path)
    expected = {f"decoder_self_layer{i + 1}.png" for i in range(layers)} | {"decoder_self_grid.png"}
    assert {path.name for path in written} == expected
    assert all(path.stat().st_size > 0 for path in written)


@pytest.mark.parametrize(("heads", "keys"), [(1, 1), (2, 2), (4, 3), (1, 12)])
def test_every_title_lies_inside_its_picture(tmp_path, monkeypatch, heads, keys):
    """A map one to three keys wide is narrower than its titles: the picture is widened for them."""
    from kformer import viz

    overflows = []
    arrange = viz._layout_with_titles_inside

    def checked(fig):
        arrange(fig)
        renderer = fig.canvas.get_renderer()
        for text in [*fig.texts, *(ax.title for ax in fig.axes)]:
            box = text.get_window_extent(renderer)
            overflows.append((text.get_text(), max(-box.x0, box.x1 - fig.bbox.width)))

    monkeypatch.setattr(viz, "_layout_with_titles_inside", checked)
    maps = {"decoder_self": np.full((2, heads, 3, keys), 1.0 / keys, "float32")}
    plot_attention(maps, ["[START]", "a", "b"], ["x"] * keys, tmp_path)
    assert len(overflows) >= 2 * heads + 2 and all(over <= 0 for _, over in overflows), overflows


def test_a_map_of_the_wrong_rank_is_refused(tmp_path):
    with pytest.raises(ValueError, match=r"\(layers, heads, Lq, Lk\)"):
        plot_attention({"cross": np.zeros((2, 3, 3))}, [], [], tmp_path)


def test_tamil_labels_draw_in_an_installed_tamil_font_without_missing_glyphs(tmp_path):
    """matplotlib's default font has no Tamil: the labels' font falls back to an installed one
    (``make browser`` installs fonts-lohit-taml; without a Tamil font this skips, unless CI=true)."""
    import os

    from kformer.viz import label_fonts

    assert label_fonts(["[START]", "the cat", "12+34"]) is None  # the default font has them all
    families = label_fonts(["[START]", "வணக்கம்"])
    if families is None:
        reason = "no installed font has Tamil (apt-get install -y fonts-lohit-taml)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    assert len(families) == 2
    maps = {"cross": np.full((1, 2, 2, 3), 1.0 / 3, "float32")}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Glyph 2990 (TAMIL LETTER MA) missing from font(s) DejaVu Sans"
        written = plot_attention(maps, ["வணக்கம்", "நல்ல"], ["hello", "good", "[END]"], tmp_path)
    assert len(written) == 2
