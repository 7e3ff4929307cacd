"""The arithmetic lesson's model as rebuilt for bench/arithmetic.py: its format and its weights."""

import numpy as np

from bench import lesson_arithmetic as lesson

# Dense 13->64 (896) + learned positions 9x64 (576) + 4 blocks x (2 LayerNorms 256, attention
# 4 x (64x64 + 64) = 16,640, MLP 64x128+128 + 128x64+64 = 16,576) + flatten 576 -> 6x13 (45,006)
LESSON_PARAMETERS = 896 + 576 + 4 * (256 + 16_640 + 16_576) + 45_006


def test_the_lessons_example_encodes_as_printed():
    assert lesson.problem_text(3144, "+", 259, 4) == "03144+259"
    assert lesson.answer_text(3144 + 259, 4) == "=03403"
    assert lesson.answer_text(259 - 577, 4) == "=-0318"
    x, y = lesson.encode_problems([3144], ["+"], [259], 4)
    assert x.shape == (1, 9, 13) and y.shape == (1, 6, 13)
    assert np.argmax(x[0], -1).tolist() == [0, 3, 1, 4, 4, 10, 2, 5, 9]  # "+" is position 10
    assert lesson.decode_answers(y) == [3403]


def test_positions_are_learned_weights_of_the_model():
    """An Embedding called on a constant would be evaluated once at build time: the positions
    would be a frozen random constant and the count 576 lower."""
    model = lesson.build_model(lesson.LessonSettings())
    assert model.count_params() == LESSON_PARAMETERS
    position_weights = [w for w in model.trainable_weights if tuple(w.shape) == (9, 64)]
    assert len(position_weights) == 1
