"""The English->Tamil lesson reproduced: its three levels of toy pairs, and its minimal model.

Each level is trained as the lesson trains it -- the level's pairs repeated ``max(10, 50 // n)``
times (the lesson's ``np.tile``), validated and tested on the level file itself -- and must be
translated exactly (the lesson's level tests only ask that some expected word appears). With a
handful of pairs ``tokens = "auto"`` picks whole words, as the lesson's vocabulary does.
"""

from __future__ import annotations

import json

import pytest
from conftest import write_tsv_pairs

from kformer.tasks import translate

# The lesson's ``create_simple_data`` levels, as it lists them.
LEVELS = {
    1: [("hello", "வணக்கம்"), ("good", "நல்ல"), ("thank", "நன்றி"), ("water", "தண்ணீர்"), ("food", "உணவு")],
    2: [("good morning", "காலை வணக்கம்"), ("thank you", "நன்றி நீங்கள்"), ("good night", "இனிய இரவு")],
    3: [("how are you", "நீங்கள் எப்படி இருக்கிறீர்கள்"), ("what is this", "இது என்ன ஆகும்")],
}

# Smaller than the lesson's training model (dim 64, 2+2 blocks, ff 128, 50 epochs of batch 8) so
# the three levels train in seconds; it still reaches 100 % on each (valid loss about 0.03-0.05).
TOY = {"dim": 32, "heads": 4, "ff_dim": 64, "encoder_layers": 1, "decoder_layers": 1, "dropout": 0.0,
       "epochs": 5, "batch_size": 8, "learning_rate": 0.003, "label_smoothing": 0.0, "patience": 5, "seed": 0}


@pytest.mark.slow
@pytest.mark.parametrize("level", sorted(LEVELS))
def test_each_level_is_translated_exactly(level, tmp_path, eager_decoding):
    pairs = LEVELS[level]
    level_file = write_tsv_pairs(tmp_path / f"level{level}.tsv", pairs)
    repeated = pairs * max(10, 50 // len(pairs))
    result = translate.train(TOY, repeated, tmp_path / "model", valid=level_file, test=level_file)

    assert result.metrics["test"]["exact_match"] == 1.0 and result.metrics["test"]["n"] == len(pairs)
    assert result.auto["tokens"]["value"] == "words" and result.config.tokens == "words"
    words = {word for pair in pairs for side in pair for word in side.split()}
    assert result.metrics["vocab"]["source_size"] == 4 + len(words)  # specials + every word, as the lesson's vocab
    written = json.loads((tmp_path / "model" / "test_translations.json").read_text(encoding="utf-8"))
    assert [row["translation"] for row in written] == [target for _, target in pairs]
    if level == 3:  # the folder loads and translates the same without the training process
        loaded = translate.load(tmp_path / "model")
        assert loaded.translate([source for source, _ in pairs]) == [target for _, target in pairs]
        assert (tmp_path / "model" / "words.txt").is_file()


def minimal_transformer(vocab_size: int):
    """The lesson's ``create_minimal_transformer`` as its code is written: per side a token
    embedding of width 64 (no positions), one 4-head attention with key_dim 16 and a residual
    LayerNormalization; the decoder adds causal self-attention and cross-attention; a Dense to the
    vocabulary. ``(batch, source) int, (batch, target) int -> (batch, target, vocab_size)``."""
    import keras

    layers = keras.layers
    source, target = keras.Input((None,), dtype="int32"), keras.Input((None,), dtype="int32")
    source_embedded = layers.Embedding(vocab_size, 64, mask_zero=True)(source)
    encoded = layers.MultiHeadAttention(num_heads=4, key_dim=16)(source_embedded, source_embedded)
    encoded = layers.LayerNormalization()(encoded + source_embedded)
    target_embedded = layers.Embedding(vocab_size, 64, mask_zero=True)(target)
    decoded = layers.MultiHeadAttention(num_heads=4, key_dim=16)(target_embedded, target_embedded,
                                                                 use_causal_mask=True)
    decoded = layers.LayerNormalization()(decoded + target_embedded)
    crossed = layers.MultiHeadAttention(num_heads=4, key_dim=16)(decoded, encoded)
    decoded = layers.LayerNormalization()(crossed + decoded)
    return keras.Model([source, target], layers.Dense(vocab_size)(decoded))


def test_the_minimal_model_has_the_parameters_its_code_gives():
    """The lesson printed 152,836 parameters for ``create_minimal_transformer(vocab_size=100)``;
    its code gives 69,604:

    - 2 embeddings 100 x 64 = 12,800; Dense 64 -> 100 = 6,500; 3 LayerNormalizations = 384;
    - 3 attentions of 16,640 each: query, key and value 64 -> 4 heads x 16 (3 x (4,096 + 64))
      plus the output 4 x 16 -> 64 (4,096 + 64).

    The lesson's printed summary lists each attention at 66,368 parameters, which is what
    ``key_dim = 64`` gives (each head as wide as the model: 3 x (64 x 256 + 256) + 256 x 64 + 64),
    not the ``key_dim = 16`` (= d_model // num_heads) its code passes; the three attention rows
    account for 3 x (66,368 - 16,640) = 149,184 of the gap. Its printed total (152,836) does not
    even equal the sum of its own printed rows (218,788), so that output did not come from this code.
    """
    import keras

    model = minimal_transformer(vocab_size=100)
    assert model.count_params() == 69_604
    attentions = [layer for layer in model.layers if isinstance(layer, keras.layers.MultiHeadAttention)]
    assert [layer.count_params() for layer in attentions] == [16_640] * 3
    wide = keras.layers.MultiHeadAttention(num_heads=4, key_dim=64)  # what the printed rows show
    wide.build((None, None, 64), (None, None, 64))
    assert wide.count_params() == 66_368
