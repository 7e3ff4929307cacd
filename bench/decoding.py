"""Decoding speed: incremental (key/value-cached) greedy and beam search vs full recomputation.

Full recomputation is what the reference's translate loop does: at every step it runs the whole
model (encoder included) on the source and the whole prefix. Here that baseline is even given the
same graph compilation as the cached path and a prefix that grows (the reference pads it to the
full length every step), so the ratio is a lower bound of the gain over the reference loop.

One model, one run: 32 decoding steps per sequence (END does not stop them, so every row costs the same),
greedy at batch 1 and 64, beam 4 at batch 1 and 8; times are medians over interleaved repeats after one
warm-up call each (graph tracing). Both paths must produce identical tokens, and the script checks it.

By default the model is a translation-sized Seq2SeqTransformer (dim 256, 8 heads, feed-forward
2048, 2+2 blocks, 8,000-token vocabularies, sources of 24 tokens) trained for a few steps on a
copy task; decoding time does not depend on what the weights learned. ``--model DIR`` times a
trained kformer translate/arithmetic folder instead (its max target length must be >= 33).

``--translator DIR`` (a trained kformer translate folder) times what a user runs instead:
``Translator.translate`` on ``--sentences`` held-out English->Spanish Anki sentences (the
held-out split of ``bench.en_es``), greedy vs beam 4 (the compiled beam loop) vs beam 4 by the
step-by-step reference search (the implementation before the compiled loop), reporting each
one's seconds and its time over greedy's: ``cold`` (first call after dropping the compiled
functions, compile included -- as ``bench.en_es`` times its decodes) and ``warm`` (median of
``--repeats`` interleaved calls). It also counts the sentences on which the compiled and the
reference beam agree. The issue's target: beam 4 <= 2x greedy time.

``--exported DIR`` (a trained kformer translate folder) exports it to ONNX and times greedy
decoding of the same held-out sentences by the exported files -- ``docs/onnx_translate_client.py``:
the encoder once, then one ``decoder_step.onnx`` call per token with the key/value cache, on ONNX
Runtime -- against Keras' cached greedy (``Translator.translate``), both in batches of 64 sentences
of similar length, tokenising included; it counts the sentences both translate alike. ``--served``
also exports a SavedModel, serves it with ``kformer serve`` on 127.0.0.1 and counts the sentences
its ``:predict`` answers as the folder does. ``--pairs TSV`` takes the sentences from the first
column of a pairs file instead (an English->Tamil test file of ``bench.en_ta_splits --write``).

    python -m bench.decoding [--model DIR] [--repeats 3]
    python -m bench.decoding --translator DIR [--sentences 200] [--repeats 3]
    python -m bench.decoding --exported DIR [--sentences 200] [--repeats 3]
    python -m bench.decoding --exported runs/en-ta --pairs SPLIT/test-tico.tsv --served
"""

from __future__ import annotations

import argparse

import numpy as np

from bench.harness import Timer, interleaved_medians, record_results
from bench.headlines import Headline
from kformer.models.generation import beam_search, greedy_decode
from kformer.models.seq2seq import Seq2SeqTransformer, compile_seq2seq

# This benchmark's rows in BENCHMARKS.md's summary (bench/headlines.py says how they are read)
HEADLINES = (
    Headline("speed, serving and memory", "Seq2seq decoding speed", "tokens/s", name="Cached decoding vs full recomputation (greedy, batch 1)",
             kformer={"system": "^kformer cached$", "decoding": "^greedy$", "batch": "^1$"},
             baseline={"system": "^full recompute$", "decoding": "^greedy$", "batch": "^1$"},
             target=">= 5x baseline"),
    Headline("speed, serving and memory", "Translation decoding time", "warm_s", name="Beam 4 vs greedy time",
             kformer={"system": "compiled loop"}, baseline={"system": "^greedy$"}, target="<= 2x baseline",
             why="beam 4 decodes four hypotheses per sentence; the target allows it twice greedy's time"),
    Headline("speed, serving and memory", "Exported translator: ", "sentences_per_s", name="Exported translator (ONNX) vs Keras",
             kformer={"system": "^ONNX Runtime"}, baseline={"system": "^Keras"},
             why="the ONNX client calls the decoder step once per token from Python; Keras runs its loop as one graph"),
    Headline("speed, serving and memory", "Exported translator with retrieval", "sentences_per_s",
             name="Exported en-ta translator with its datastore (ONNX) vs Keras",
             kformer={"system": "^ONNX Runtime"}, baseline={"system": "^Keras"},
             why="the ONNX client calls the decoder step, and its neighbour search, once per token from Python"),
)

TOKENS = 32
VOCAB, SOURCE_LENGTH = 8000, 24


def reference_sized_model(seed: int = 0) -> Seq2SeqTransformer:
    import keras

    keras.utils.set_random_seed(seed)
    model = Seq2SeqTransformer(VOCAB, VOCAB, SOURCE_LENGTH, TOKENS + 1, dim=256, heads=8, ff_dim=2048,
                               encoder_layers=2, decoder_layers=2, dropout=0.1)
    # A few steps on a copy task, so the weights are trained ones rather than the initial draw.
    rng = np.random.default_rng(seed)
    source = rng.integers(4, VOCAB, size=(256, SOURCE_LENGTH)).astype("int32")
    target = source[:, :TOKENS]
    target_in = np.concatenate([np.full((256, 1), 2), target], axis=1)[:, : TOKENS + 1].astype("int32")
    target_out = np.concatenate([target, np.full((256, 1), 3)], axis=1)[:, : TOKENS + 1].astype("int32")
    compile_seq2seq(model, 1e-3, 2, 8)
    model.fit({"source": source, "target_in": target_in}, target_out, batch_size=64, epochs=1, verbose=0)
    return model


def load_model(model_dir):
    from kformer.artifacts import load_keras_model, read_manifest

    manifest = read_manifest(model_dir)
    return load_keras_model(f"{model_dir}/{manifest.get('model_file', 'model.keras')}")


def held_out_sentences(count: int, pairs_file: str | None = None) -> list[str]:
    """The first ``count`` English sentences of ``pairs_file`` or, without one, of ``bench.en_es``'s
    held-out pairs (2,000, seed 0)."""
    from bench.harness import require_shared_data
    from kformer.data.pairs import random_holdout, read_pairs

    if pairs_file:
        return [pair.source for pair in read_pairs(pairs_file)[:count]]
    pairs = read_pairs(require_shared_data("en-es-anki", "spa.txt.gz"))
    return [pair.source for pair in random_holdout(pairs, 2000, seed=0)[1][:count]]


def beam_over_greedy(folder: str, sentences: list[str], repeats: int, beam: int = 4,
                     reference: bool = True) -> tuple[list[dict], str]:
    """Rows timing ``Translator.translate`` greedy, compiled beam and (``reference``) reference
    beam (see the module docstring), and a note on their agreement."""
    from unittest import mock

    from kformer.models import generation
    from kformer.tasks import translate

    translator = translate.load(folder)
    systems = {
        "greedy": (1, generation.beam_search),
        f"beam {beam} (compiled loop)": (beam, generation.beam_search),
        f"beam {beam} (reference: step by step)": (beam, generation.reference_beam_search),
    }
    if not reference:
        systems.popitem()

    def run(name):
        width, search = systems[name]
        with mock.patch.object(generation, "beam_search", search):  # translate imports it per call
            return translator.translate(sentences, beam=width)

    cold, outputs = {}, {}
    for name in systems:
        generation.drop_compiled(translator.model)  # compile included, as bench.en_es times decodes
        with Timer() as timer:
            outputs[name] = run(name)
        cold[name] = timer.seconds
    for name in systems:  # dropping the compiled functions above dropped the others' too: compile again
        run(name)

    def timed(name):
        def measure():
            with Timer() as timer:
                run(name)
            return timer.seconds

        return measure

    warm = interleaved_medians({name: timed(name) for name in systems}, repeats=repeats)
    rows = []
    for name in systems:
        seconds = float(np.median(warm[name]))
        rows.append({"system": name, "sentences": len(sentences), "cold_s": cold[name],
                     "cold_over_greedy": f"{cold[name] / cold['greedy']:.2f}×", "warm_s": seconds,
                     "warm_over_greedy": f"{seconds / float(np.median(warm['greedy'])):.2f}×"})
    if not reference:
        return rows, "reference beam not run"
    compiled, stepwise = (outputs[name] for name in list(systems)[1:])
    same = sum(a == b for a, b in zip(compiled, stepwise, strict=True))
    return rows, f"compiled and reference beam {beam} agree on {same}/{len(sentences)} sentences"


def exported_vs_keras(folder: str, sentences: list[str], repeats: int, served: bool = False) -> tuple[list[dict], str, bool]:
    """Rows timing greedy decoding by the ONNX export (the reference client) and by Keras (cached),
    a note on how many sentences each export (``served``: a SavedModel behind `kformer serve` too)
    translates as the folder does, and whether the folder decodes with a retrieval datastore."""
    import importlib.util
    import tempfile
    from pathlib import Path

    from bench.harness import ROOT
    from kformer.export import export
    from kformer.tasks import translate

    translator = translate.load(folder)
    work = Path(tempfile.mkdtemp(prefix="kformer-bench-decoding-"))
    export(folder, work / "onnx", "onnx")
    spec = importlib.util.spec_from_file_location("client", ROOT / "docs" / "onnx_translate_client.py")
    client = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(client)
    onnx = client.OnnxTranslator(work / "onnx")
    systems = {"Keras, cached greedy (Translator.translate)": translator.translate,
               "ONNX Runtime, cached decoder step (docs/onnx_translate_client.py)": onnx.translate}
    outputs = {name: run(sentences) for name, run in systems.items()}  # warm-up (Keras compiles its loop)

    def timed(run):
        def measure():
            with Timer() as timer:
                run(sentences)
            return timer.seconds

        return measure

    seconds = interleaved_medians({name: timed(run) for name, run in systems.items()}, repeats=repeats)
    keras_name = next(iter(systems))
    keras_s = float(np.median(seconds[keras_name]))
    rows = [{"system": name, "sentences": len(sentences), "seconds": float(np.median(seconds[name])),
             "sentences_per_s": len(sentences) / float(np.median(seconds[name])),
             "vs_keras": f"{keras_s / float(np.median(seconds[name])):.2f}×"} for name in systems]
    keras_out, onnx_out = outputs.values()
    same = sum(a == b for a, b in zip(keras_out, onnx_out, strict=True))
    note = f"identical greedy translations: {same}/{len(sentences)}"
    if served:
        export(folder, work / "saved_model", "saved_model")
        answers = served_translations(work / "saved_model", sentences, work / "serve.log")
        same = sum(a == b for a, b in zip(keras_out, answers, strict=True))
        note += f"; the SavedModel export served by `kformer serve` answers {same}/{len(sentences)} alike"
    return rows, note, translator.retrieval is not None


def served_translations(export_dir, sentences: list[str], log, port: int = 8741, batch: int = 32) -> list[str]:
    """The translations `kformer serve` of ``export_dir`` (on 127.0.0.1, stopped after) answers
    to ``:predict`` requests of ``batch`` sentences."""
    import json
    import urllib.request

    from bench.serve import Service

    service = Service(export_dir, port, [], log, name="translator")
    try:
        service.wait_ready(timeout=900)
        answers = []
        for start in range(0, len(sentences), batch):
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/v1/models/translator:predict", method="POST",
                data=json.dumps({"instances": sentences[start:start + batch]}).encode(),
                headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=900) as response:
                answers += [row["translation"] for row in json.load(response)["predictions"]]
        return answers
    finally:
        service.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", metavar="DIR", help="a trained kformer seq2seq model folder (default: build one)")
    parser.add_argument("--translator", metavar="DIR",
                        help="a trained kformer translate folder: time greedy vs beam 4 on held-out sentences instead")
    parser.add_argument("--exported", metavar="DIR",
                        help="a trained kformer translate folder: time its ONNX export's greedy decoding against "
                        "Keras' cached greedy instead")
    parser.add_argument("--pairs", metavar="TSV", help="with --translator / --exported: take the sentences from "
                        "this pairs file's first column (default: bench.en_es's held-out pairs)")
    parser.add_argument("--served", action="store_true",
                        help="with --exported: also serve a SavedModel export and compare its answers")
    parser.add_argument("--sentences", type=int, default=200,
                        help="held-out sentences for --translator / --exported (default 200)")
    parser.add_argument("--reference", action=argparse.BooleanOptionalAction, default=True,
                        help="with --translator, also time the step-by-step reference beam (default: on)")
    parser.add_argument("--repeats", type=int, default=2, help="timed repeats per setting (median reported)")
    parser.add_argument("--dry-run", action="store_true", help="print the table without adding it to BENCHMARKS.md")
    args = parser.parse_args()
    if args.exported:
        sentences = held_out_sentences(args.sentences, args.pairs)
        rows, note, with_retrieval = exported_vs_keras(args.exported, sentences, args.repeats, served=args.served)
        notes = (f"Model: {args.exported}; {len(sentences)} sentences of {args.pairs or 'bench.en_es held out'}; "
                 f"batches of 64, tokenising included, greedy with kformer's repeat limit. {note}.")
        if args.dry_run:
            from bench.harness import results_table

            print(results_table(rows) + "\n\n" + notes)
            return
        title = ("Exported translator with retrieval: ONNX greedy decoding vs Keras cached greedy" if with_retrieval
                 else "Exported translator: ONNX greedy decoding vs Keras cached greedy")
        record_results(title, rows, notes=notes)
        return
    if args.translator:
        rows, note = beam_over_greedy(args.translator, held_out_sentences(args.sentences, args.pairs), args.repeats,
                                      reference=args.reference)
        if args.dry_run:
            from bench.harness import results_table

            print(results_table(rows))
            print(note)
            return
        record_results("Translation decoding time: beam 4 vs greedy", rows,
                       notes=f"Target: beam 4 <= 2x greedy time. Model: {args.translator}. {note}.")
        return
    model = load_model(args.model) if args.model else reference_sized_model()
    if model.max_target_length < TOKENS:
        raise SystemExit(f"the model decodes at most {model.max_target_length} tokens; need {TOKENS}")
    rng = np.random.default_rng(1)
    rows, notes = [], []
    settings = [("greedy", 1, 1), ("greedy", 64, 1), ("beam 4", 1, 4), ("beam 4", 8, 4)]
    for name, batch, width in settings:
        source = rng.integers(4, min(model.source_vocab_size, VOCAB), size=(batch, min(SOURCE_LENGTH, model.max_source_length)))
        source = source.astype("int32")

        def run(use_cache, source=source, width=width):
            if width == 1:
                return greedy_decode(model, source, TOKENS, use_cache=use_cache, stop_at_end=False)
            return beam_search(model, source, TOKENS, beam_width=width, use_cache=use_cache, stop_at_end=False)

        cached_tokens, full_tokens = run(True), run(False)  # warm-up (tracing) and the equality check
        same = np.array_equal(cached_tokens, full_tokens)

        def timed(use_cache):
            def measure():
                with Timer() as timer:
                    out = run(use_cache)
                return out.shape[0] * TOKENS / timer.seconds  # every row runs TOKENS steps

            return measure

        values = interleaved_medians({"cached": timed(True), "full": timed(False)}, repeats=args.repeats)
        cached, full = float(np.median(values["cached"])), float(np.median(values["full"]))
        for system, rate in (("full recompute", full), ("kformer cached", cached)):
            rows.append({"system": system, "decoding": name, "batch": batch, "tokens/row": TOKENS,
                         "tokens/s": rate, "speed-up": f"{rate / full:.1f}×", "same tokens": same})
        notes.append(f"{name}, batch {batch}: cached {cached:,.0f} tok/s vs full {full:,.0f} tok/s = {cached / full:.1f}×")
    config = model.get_config()
    described = (f"model: dim {config['dim']}, {config['heads']} heads, ff {config['ff_dim']}, "
                 f"{config['encoder_layers']}+{config['decoder_layers']} blocks, target vocab {config['target_vocab_size']}"
                 + (f", from {args.model}" if args.model else ", trained briefly on a copy task"))
    if args.dry_run:
        from bench.harness import results_table

        print(results_table(rows))
        return
    record_results(
        "Seq2seq decoding speed: key/value cache vs full recomputation",
        rows,
        notes="\n".join(["Target: cached greedy >= 5x full-recompute greedy at 32 tokens, batch 1 and 64.",
                         described, *notes]),
    )


if __name__ == "__main__":
    main()
