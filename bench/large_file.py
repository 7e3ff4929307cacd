"""A large labelled CSV through `kformer predict --data`, `kformer evaluate` and `kformer train`.

Issue 11: predict and evaluate stream a file of any size with bounded memory; train reports its
peak RSS. This generates a CSV of about ``--size-mb`` MB (default 1024) and a file 1/16 of it in a
temporary folder, trains a tiny classifier on a small sample, then runs each command as its own
process while sampling its resident memory (``/proc/PID/status``: VmRSS every 0.1 s, VmHWM at the
end). Bounded memory means: predict/evaluate peak RSS on the big file is about the same as on
the small one. It also measures the Python heap peak (tracemalloc) of reading the big file with
``kformer.data.readers.iter_texts``. Nothing is written outside the temporary folder.

    python bench/large_file.py                       # ~1 GB: minutes, needs ~2 GB of disk
    python bench/large_file.py --size-mb 4 --train   # a smoke run in seconds
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

from bench.headlines import Headline

# This benchmark's rows in BENCHMARKS.md's summary (bench/headlines.py says how they are read)
HEADLINES = (
    Headline("speed, serving and memory", "Large files", "peak RSS MB", name="predict --data peak memory, 14x larger file",
             kformer={"command": "^predict --data$", "file": "^big"},
             baseline={"command": "^predict --data$", "file": "^small"}, lower_is_better=True,
             why="noise: memory does not grow with the file"),
)

WORDS = {
    "billing": "invoice refund charge payment bill price card".split(),
    "hardware": "laptop screen keyboard mouse boot battery fan".split(),
    "access": "password login account locked permission vpn token".split(),
}
FILLER = "please help me with my the a today urgent thanks again issue since monday".split()


def write_csv(path: Path, size_bytes: int, seed: int = 0) -> int:
    """A ``text,label`` CSV of about ``size_bytes``; returns its number of rows."""
    rng = random.Random(seed)
    labels = list(WORDS)
    rows = written = 0
    with open(path, "w", encoding="utf-8", newline="") as handle:
        handle.write("text,label\n")
        while written < size_bytes:
            block = []
            for _ in range(10_000):
                label = rng.choice(labels)
                text = " ".join(rng.sample(FILLER, 8) + rng.sample(WORDS[label], 2))
                block.append(f"{text},{label}\n")
            chunk = "".join(block)
            handle.write(chunk)
            written += len(chunk)
            rows += len(block)
    return rows


def peak_rss_mb(command: list[str]) -> tuple[float, float, int]:
    """Run ``command``; ``(seconds, peak RSS MB, exit status)`` (VmHWM, or the largest sample)."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    status_file = Path(f"/proc/{process.pid}/status")
    samples = [0]

    def sample():
        while process.poll() is None:
            try:
                fields = dict(line.split(":", 1) for line in status_file.read_text().splitlines() if ":" in line)
                samples.append(max(int(fields.get("VmHWM", "0 kB").split()[0]), int(fields.get("VmRSS", "0 kB").split()[0])))
            except (OSError, ValueError):
                pass
            time.sleep(0.1)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    _, err = process.communicate()
    thread.join()
    if process.returncode != 0:
        print(err.decode(errors="replace")[-2000:], file=sys.stderr)
    return time.perf_counter() - started, max(samples) / 1024, process.returncode


def reader_heap_mb(path: Path) -> tuple[float, int]:
    """Python heap peak (tracemalloc, MB) of streaming ``path`` through iter_texts; rows read."""
    from kformer.data.readers import iter_texts

    tracemalloc.start()
    rows = sum(len(chunk) for chunk in iter_texts(path))
    peak = tracemalloc.get_traced_memory()[1] / 2**20
    tracemalloc.stop()
    return peak, rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=float, default=1024.0, help="size of the big CSV in MB (default 1024)")
    parser.add_argument("--train", action="store_true", help="also train on the big file and report its peak RSS")
    args = parser.parse_args(argv)
    kformer = [sys.executable, "-m", "kformer"]
    with tempfile.TemporaryDirectory(prefix="kformer-large-") as tmp:
        root = Path(tmp)
        big, small, sample = root / "big.csv", root / "small.csv", root / "sample.csv"
        size = int(args.size_mb * 2**20)
        big_rows = write_csv(big, size, seed=1)
        small_rows = write_csv(small, size // 16, seed=2)
        write_csv(sample, 200_000, seed=3)
        model = root / "model"
        seconds, rss, code = peak_rss_mb([*kformer, "train", "classify", "--data", str(sample), "--out", str(model),
                                          "--epochs", "1", "--max-length", "16", "--vocab-size", "200", "--quiet"])
        assert code == 0, "training the tiny model failed"
        print(f"files: big {big.stat().st_size / 2**20:,.1f} MB ({big_rows:,} rows), "
              f"small {small.stat().st_size / 2**20:,.1f} MB ({small_rows:,} rows)")
        print(f"{'command':<34} {'file':>6} {'seconds':>8} {'peak RSS MB':>12}")
        results = {}
        for name, path in (("small", small), ("big", big)):
            for command, extra in (("predict --data", ["predict", str(model), "--data", str(path)]),
                                   ("evaluate --data", ["evaluate", str(model), "--data", str(path), "--json",
                                                        "--out", str(root / f"eval-{name}")])):
                seconds, rss, code = peak_rss_mb([*kformer, *extra])
                results[(command, name)] = rss
                print(f"{command:<34} {name:>6} {seconds:8.1f} {rss:12.0f}" + ("" if code == 0 else f"  (exit {code})"))
        if args.train:
            seconds, rss, code = peak_rss_mb([*kformer, "train", "classify", "--data", str(big), "--out",
                                              str(root / "big-model"), "--epochs", "1", "--max-length", "16",
                                              "--vocab-size", "200", "--quiet"])
            print(f"{'train classify (1 epoch)':<34} {'big':>6} {seconds:8.1f} {rss:12.0f}" + ("" if code == 0 else f"  (exit {code})"))
        heap, rows = reader_heap_mb(big)
        print(f"iter_texts over the big file: {rows:,} rows, Python heap peak {heap:.1f} MB (tracemalloc)")
        for command in ("predict --data", "evaluate --data"):
            ratio = results[(command, "big")] / results[(command, "small")]
            print(f"{command}: peak RSS big/small = {ratio:.2f} for a file {big_rows / small_rows:.0f}x larger")
    return 0


if __name__ == "__main__":
    sys.exit(main())
