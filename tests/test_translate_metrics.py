"""BLEU / chrF / exact match agree with sacrebleu on known strings."""

import pytest

from kformer.metrics import translation_scores


def test_scores_on_known_strings():
    refs = ["the cat is on the mat", "there is a cat on the mat", "él está aquí"]
    hyps = ["the cat is on the mat", "a cat is on the mat", "ella está aquí"]
    scores = translation_scores(hyps, refs)
    assert scores["n"] == 3
    assert scores["exact_match"] == pytest.approx(1 / 3)
    # sacrebleu 2.6 corpus scores for exactly these strings (13a tokens; chrF n=6, beta=2)
    assert scores["bleu"] == pytest.approx(62.122, abs=0.01)
    assert scores["chrf"] == pytest.approx(71.304, abs=0.01)


def test_bleu_brevity_penalty_by_hand():
    # all n-gram precisions are 1; brevity penalty exp(1 - 5/4)
    import math

    assert translation_scores(["a b c d"], ["a b c d e"])["bleu"] == pytest.approx(100 * math.exp(-0.25), abs=1e-6)


def test_perfect_and_empty_and_mismatch():
    same = ["இந்த அறிகுறிகள் எவ்வளவு காலமாக இருந்து வருகின்றன?", "hola a todos mis amigos"]
    assert translation_scores(same, same) == {"bleu": pytest.approx(100.0), "chrf": pytest.approx(100.0),
                                              "exact_match": 1.0, "n": 2}
    assert translation_scores(["x y z"], ["a b c"])["bleu"] == pytest.approx(0.0)
    assert translation_scores([], [])["n"] == 0
    with pytest.raises(ValueError):
        translation_scores(["a"], ["a", "b"])
