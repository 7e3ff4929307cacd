"""Helpers of the serving and export tests: the tiny real models' settings (the session fixture
``tiny_models`` of conftest.py trains them once), a uvicorn thread."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from pathlib import Path

from conftest import number_pairs, write_tickets

# seconds a test waits for a service's models to load: ample, because waiting costs nothing when they load
# fast and a loaded 2-core machine took over 10 s for three tiny models
LOAD_WAIT_S = 120
TINY_CLASSIFIER = {"max_length": 16, "vocab_size": 200, "batch_size": 16, "dim": 16, "ff_dim": 32, "seed": 3,
                   "epochs": 3, "learning_rate": 0.005,
                   "wide": False}  # the network alone: export compares it with its SavedModel/ONNX files
TINY_TRANSLATOR = {"vocab_size": 120, "dim": 32, "heads": 2, "ff_dim": 64, "encoder_layers": 1, "decoder_layers": 1,
                   "dropout": 0.0, "batch_size": 16, "learning_rate": 0.01, "label_smoothing": 0.0, "epochs": 4,
                   # the layout these tests were written for (one vocab.spm, post-norm, untied output):
                   # auto would pick separate vocabularies, pre-norm and a tied output for English->Tamil
                   "shared_vocab": True, "norm_first": False, "tie_embeddings": False}
TINY_ARITHMETIC = {"digits": 2, "held_out_size": 16, "dim": 16, "heads": 2, "ff_dim": 32, "encoder_layers": 1,
                   "decoder_layers": 1, "batch_size": 32, "steps_per_epoch": 5, "epochs": 1, "warmup_steps": 2,
                   "jit_compile": False, "held_out_per_length": 4}


def train_tiny_models(root: Path) -> dict[str, Path]:
    """Folders of a tiny tickets classifier, English->Tamil translator and 2-digit arithmetic
    model in ``root`` (a few seconds each)."""
    from kformer.tasks import arithmetic, classify, translate

    tickets = write_tickets(root / "tickets.csv", 240, seed=5)
    classify.train(TINY_CLASSIFIER, tickets, root / "tickets")
    pairs = number_pairs(60, seed=1)
    translate.train(TINY_TRANSLATOR, pairs, root / "en-ta", valid=pairs[:16], test=pairs[:16])
    arithmetic.train(TINY_ARITHMETIC, out=root / "arith")
    return {"tickets": root / "tickets", "en-ta": root / "en-ta", "arith": root / "arith"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_ready(url: str, process, log: Path, timeout: float = LOAD_WAIT_S) -> None:
    """Wait until the `kformer serve` subprocess ``process`` at ``url`` says it is ready; fail with
    the end of its ``log`` when it exits first or takes over ``timeout`` seconds."""
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/v2/health/ready", timeout=2).status_code == 200:
                return
        assert process.poll() is None and time.monotonic() < deadline, Path(log).read_text()[-3000:]
        time.sleep(0.2)


@contextlib.contextmanager
def uvicorn_thread(app, timeout: float = 120.0):
    """Serve ``app`` on 127.0.0.1 (a free port) from a thread until the block ends; yield the
    base URL once every model is ready. Start-up and shutdown are bounded by ``timeout``."""
    import httpx
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning",
                                           timeout_graceful_shutdown=5))
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/v2/health/ready", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline or not thread.is_alive():
                raise TimeoutError(f"the test server at {url} did not become ready within {timeout:.0f} s")
            time.sleep(0.1)
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=15)
