"""Using a trained arithmetic model: load its folder, solve problems, draw its attention.

Plain functions (no argparse) that a script or a server can call; ``kformer train arithmetic``
(``kformer.commands.seq2seq``) writes the folders they read.
"""

from __future__ import annotations

from pathlib import Path

from kformer.errors import KformerError

TASK = "arithmetic"
MODEL_FILE = "model.keras"


def load_arithmetic(model_dir):
    """``(model, format, manifest)`` from a folder written by :func:`train_arithmetic`."""
    import kformer.models.seq2seq  # noqa: F401  registers Seq2SeqTransformer for loading
    from kformer.artifacts import load_keras_model, read_manifest
    from kformer.data.arithmetic import ArithmeticFormat

    manifest = read_manifest(model_dir)
    if manifest.get("task") != TASK:
        raise KformerError(f"{model_dir} holds a '{manifest.get('task')}' model, not an arithmetic one")
    try:
        fmt = ArithmeticFormat(**manifest["format"])
    except (KeyError, TypeError):
        raise KformerError(f"{model_dir}/kformer.json has no valid 'format'; retrain the model") from None
    model = load_keras_model(Path(model_dir) / manifest.get("model_file", MODEL_FILE))
    return model, fmt, manifest


def solve_problems(model, fmt, problems, beam: int = 1, batch_size: int = 1000) -> list[int | None]:
    """Answer ``[(a, op, b), ...]`` with the model; None where its output is not a number."""
    from kformer.models.generation import beam_search, greedy_decode

    _check_operands(fmt, problems)
    answers: list[int | None] = []
    for start in range(0, len(problems), batch_size):
        source = fmt.encode_sources(problems[start : start + batch_size])
        if beam > 1:
            generated = beam_search(model, source, fmt.target_length, beam_width=beam)
        else:
            generated = greedy_decode(model, source, fmt.target_length)
        answers.extend(fmt.decode_answer(row) for row in generated)
    return answers


def _check_operands(fmt, problems) -> None:
    limit = 10**fmt.digits
    for a, op, b in problems:
        if a >= limit or b >= limit or op not in fmt.ops:
            raise KformerError(
                f"{a}{op}{b} is outside what this model learned ({fmt.digits}-digit operands, operators "
                f"'{fmt.ops}')"
            )


def draw_attention(model, fmt, problem_text: str, out_dir) -> list[Path]:
    """Solve one problem and draw encoder, decoder-self and cross attention PNGs into ``out_dir``."""
    import numpy as np

    from kformer.data.arithmetic import parse_problem
    from kformer.models.generation import greedy_decode
    from kformer.text.specials import END_ID, START, START_ID
    from kformer.viz import plot_attention

    problem = parse_problem(problem_text)
    _check_operands(fmt, [problem])
    vocab = fmt.vocabulary
    source = fmt.encode_sources([problem])
    generated = greedy_decode(model, source, fmt.target_length)[0]
    # The decoder reads [START] + answer; an answer that never ended is cut to the positions it has.
    answer_ids = [int(t) for t in generated if t > END_ID][: model.max_target_length - 1]
    target_in = np.array([[START_ID, *answer_ids]], dtype="int32")
    maps = {name: stack[0] for name, stack in model.attention_maps(source, target_in).items()}
    source_tokens = fmt.source_tokens(*problem)
    target_tokens = [START] + [vocab.tokens[t] for t in answer_ids]
    rows = {"encoder": source_tokens, "decoder_self": target_tokens, "cross": target_tokens}
    cols = {"encoder": source_tokens, "decoder_self": target_tokens, "cross": source_tokens}
    return plot_attention(maps, rows, cols, out_dir)
