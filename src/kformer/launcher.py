"""A data-parallel job on this machine that restarts itself when a process is lost (the launcher).

``kformer train TASK ... --distribute --num-processes N`` without ``--coordinator`` runs the job
on this machine: :func:`launch` starts N copies of the same command, process I with
``--coordinator 127.0.0.1:PORT --process-id I`` (a free loopback port at every start), and watches
them. JAX's distributed runtime cannot go on with a process missing, so a lost process costs the
whole group, as with torchrun's elastic agent or a Kubernetes Job: the launcher stops the rest
(SIGTERM, then SIGKILL after :data:`STOP_GRACE_S`) and starts the group again with
``--resume auto``, from the newest complete checkpoint, up to ``max_restarts`` times.

A process is lost when it ends with a failure -- killed by a signal (the OOM killer's SIGKILL, a
pre-empted machine), or an exit status other than 0 and kformer's own errors of the user's making
(bad input and its kin, :data:`kformer.errors.ERROR_TABLE`, and Ctrl-C: a restart would end the
same way) -- or when its heartbeat file is older than ``heartbeat_timeout`` seconds. Training
touches that file after every batch (:class:`kformer.training.callbacks.Heartbeat`) from the start
of training to its end; start-up, the final scoring and the writing of the model folder are not
watched (joining the job has JAX's own time limit).

Each started process learns its part from ``KFORMER_JOB`` (:func:`current_process`): its number,
its heartbeat file, the restarts so far (process 0 writes the latest to ``train.log`` and all of
them to ``metrics.json``) and the user's command. Process 0 shares this terminal; the others write
to a log in a temporary folder, whose last line is quoted when one of them is lost. The processes
run in a session of their own, so Ctrl-C reaches the launcher only, which stops them; on Linux
they also die with it. Nothing here imports Keras: the launcher is a small supervisor.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

from kformer.errors import ERROR_TABLE, BadInput

ENV = "KFORMER_JOB"
PROGRAM = ("-m", "kformer")  # what each process runs with this Python, before the command's arguments
STOP_GRACE_S = 10.0  # after SIGTERM, how long a process may take to end before SIGKILL
POLL_S = 0.2
# exit statuses a restart would only repeat: kformer's errors of the user's making, and Ctrl-C
FINAL_EXITS = frozenset({exit_code for exit_code, _, _ in ERROR_TABLE.values()} | {130})


@dataclass(frozen=True)
class LaunchConfig:
    """How the launcher restarts a job on this machine; each field is a ``kformer train`` flag
    (``metadata``: its flag, metavar and help; ``kformer.cli.distribute``)."""

    max_restarts: int = field(default=3, metadata={
        "flag": "--max-restarts", "metavar": "N",
        "help": "restarts of the whole group from its last complete checkpoint after a process is lost "
                "(0: none)"})
    heartbeat_timeout: float = field(default=300.0, metadata={
        "flag": "--heartbeat-timeout", "metavar": "SECONDS",
        "help": "a training process that finishes no batch for this long counts as hung and is lost"})

    def __post_init__(self) -> None:
        restarts, timeout = self.max_restarts, self.heartbeat_timeout
        if isinstance(restarts, bool) or not isinstance(restarts, int) or restarts < 0:
            raise BadInput(f"{{field}} must be a whole number of at least 0, got {restarts!r}", field="max_restarts")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise BadInput(f"{{field}} must be a number of seconds above 0, got {timeout!r}",
                           field="heartbeat_timeout")

    @classmethod
    def of(cls, **given: Any) -> LaunchConfig:
        """The settings ``given`` (None: the default)."""
        return cls(**{name: value for name, value in given.items() if value is not None})


@dataclass(frozen=True)
class JobProcess:
    """What a process started by :func:`launch` knows of its job (``KFORMER_JOB``): its number, the
    file it touches while it trains, the restarts before this start (dicts: ``restart``,
    ``process``, ``cause``, ``after_seconds``, ``at``) and the user's command."""

    process_id: int
    heartbeat: Path
    restarts: tuple[dict, ...] = ()
    command: tuple[str, ...] = ()


def current_process(environ: dict[str, str] | None = None) -> JobProcess | None:
    """This process's part in a job that :func:`launch` started (None: it was not started so)."""
    raw = (os.environ if environ is None else environ).get(ENV)
    if not raw:
        return None
    try:
        data = json.loads(raw)
        return JobProcess(int(data["process"]), Path(data["heartbeat"]), tuple(data.get("restarts") or ()),
                          tuple(data.get("command") or ()))
    except (ValueError, KeyError, TypeError):
        raise BadInput(f"environment variable {ENV} is not what kformer's launcher writes: {raw[:80]!r}") from None


def restart_line(restart: dict) -> str:
    """``restart 1 of at most 3: process 1 was killed by SIGKILL after 42 s; ...`` (the log line)."""
    return (f"restart {restart['restart']} of at most {restart['max_restarts']}: process {restart['process']} "
            f"{restart['cause']} after {restart['after_seconds']:.0f} s; the group starts again from its last "
            "complete checkpoint (--resume auto)")


@dataclass(frozen=True)
class Outcome:
    """How a start of the group ended: ``code`` 0 when every process finished; else the
    ``process`` that was lost or failed, ``cause`` in words, and whether to ``restart``."""

    code: int
    process: int | None = None
    cause: str = ""
    restart: bool = False


class Group:
    """One start of the job's ``count`` processes (:meth:`start`), watched (:meth:`watch`) and
    stopped (:meth:`stop`); their heartbeat files and logs are in ``scratch``."""

    def __init__(self, count: int, scratch: Path):
        self.processes: list[subprocess.Popen] = []
        self.heartbeats = [scratch / f"heartbeat-{i}" for i in range(count)]
        self.logs: list[Path | None] = [None, *(scratch / f"process-{i}.log" for i in range(1, count))]
        self._handles: list[TextIO] = []

    def start(self, command: Sequence[str], job: dict) -> None:
        """``python -m kformer COMMAND`` once per process on a fresh loopback port; ``job`` goes to
        each in ``KFORMER_JOB`` with its number and heartbeat file."""
        address = f"127.0.0.1:{_free_port()}"
        threads = str(max(1, _usable_cores() // len(self.heartbeats)))
        for i, heartbeat in enumerate(self.heartbeats):
            heartbeat.unlink(missing_ok=True)
            env = {**os.environ, ENV: json.dumps({**job, "process": i, "heartbeat": str(heartbeat)})}
            env.setdefault("KFORMER_THREADS", threads)
            out, err = _descriptor(sys.stdout), _descriptor(sys.stderr)  # process 0: this terminal
            if self.logs[i] is not None:
                out = err = open(self.logs[i], "w", encoding="utf-8")  # noqa: SIM115 - closed by stop()
                self._handles.append(out)
            argv = [sys.executable, *PROGRAM, *command, "--coordinator", address, "--process-id", str(i)]
            self.processes.append(subprocess.Popen(argv, env=env, stdout=out, stderr=err, start_new_session=True,
                                                   preexec_fn=_die_with_parent))

    def watch(self, heartbeat_timeout: float) -> Outcome:
        """Until every process has exited 0 (code 0), one fails, or a heartbeat is too old."""
        while True:
            codes = [process.poll() for process in self.processes]
            failed = [i for i, code in enumerate(codes) if code not in (None, 0)]
            if failed:  # the cause rather than a process that died of it (JAX aborts a process whose peer is gone)
                first = min(failed, key=lambda i: (not _killed_from_outside(codes[i]), i))
                return self._failed(first, codes[first])
            if all(code == 0 for code in codes):
                return Outcome(0)
            ages = {i: age for i, age in enumerate(map(_age, self.heartbeats)) if age is not None and codes[i] is None}
            stale = max(ages, key=ages.get, default=None)
            if stale is not None and ages[stale] > heartbeat_timeout:
                return Outcome(1, stale, f"finished no batch for {ages[stale]:.0f} s (hung; "
                                         f"--heartbeat-timeout {heartbeat_timeout:g})", restart=True)
            time.sleep(POLL_S)

    def _failed(self, process: int, code: int) -> Outcome:
        if code < 0:
            return Outcome(1, process, f"was killed by {_signal_name(-code)}", restart=True)
        if code in FINAL_EXITS:
            return Outcome(code, process, f"exited with status {code}")
        return Outcome(1, process, f"exited with status {code}" + _quoted(self.last_line(process)), restart=True)

    def last_line(self, process: int) -> str:
        """The last line process ``process`` wrote to its log ('' for process 0, which has none)."""
        path = self.logs[process]
        if path is None or not path.is_file():
            return ""
        lines = [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
        return lines[-1].strip() if lines else ""

    def wait(self, process: int, seconds: float) -> int | None:
        """Process ``process``'s exit status, waiting up to ``seconds`` for it (None: still running)."""
        try:
            return self.processes[process].wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            return None

    def stop(self) -> None:
        """SIGTERM to every process still running, SIGKILL to those still there after STOP_GRACE_S."""
        running = [process for process in self.processes if process.poll() is None]
        for process in running:
            process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for process in running:
            try:
                process.wait(timeout=max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for handle in self._handles:
            handle.close()
        self._handles = []


def launch(command: Sequence[str], count: int, config: LaunchConfig = LaunchConfig(), *,
           err: TextIO | None = None) -> int:
    """Run ``kformer COMMAND`` as a job of ``count`` processes on this machine until it finishes,
    restarting the whole group from its last complete checkpoint when a process is lost (see the
    module's docstring); returns the exit status for the launcher's own process."""
    err = err or sys.stderr
    command, restarts, began = list(command), [], time.monotonic()
    previous = _on_sigterm(_exit_on_sigterm)
    try:
        with tempfile.TemporaryDirectory(prefix="kformer-job-") as scratch:
            while True:
                job = {"restarts": restarts, "command": ["kformer", *command]}
                started = command if not restarts else [*command, "--resume", "auto"]
                outcome = _run_group(Group(count, Path(scratch)), started, job, config, err)
                if not outcome.restart:
                    return outcome.code
                if len(restarts) >= config.max_restarts:
                    print(f"kformer: error: process {outcome.process} {outcome.cause}; no restart left "
                          f"(--max-restarts {config.max_restarts}): the checkpoints are kept, run the same command "
                          "with --resume auto to go on", file=err)
                    return 1
                restarts.append({"restart": len(restarts) + 1, "max_restarts": config.max_restarts,
                                 "process": outcome.process, "cause": outcome.cause,
                                 "after_seconds": round(time.monotonic() - began, 1),
                                 "at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")})
                print(f"kformer: {restart_line(restarts[-1])}", file=err, flush=True)
    except KeyboardInterrupt:
        print("kformer: interrupted; the processes are stopped and their checkpoints kept: run the same command "
              f"with --resume auto to go on ({shlex.join(['kformer', *command, '--resume', 'auto'])})", file=err)
        return 130
    finally:
        _on_sigterm(previous)


def _run_group(group: Group, command: list[str], job: dict, config: LaunchConfig, err: TextIO) -> Outcome:
    """Start the group, watch it, and stop whatever still runs however this ends; says a worker's
    final error (bad input) when process 0 has not said it."""
    try:
        group.start(command, job)
        outcome = group.watch(config.heartbeat_timeout)
        if outcome.code and not outcome.restart and outcome.process:
            if group.wait(0, STOP_GRACE_S) not in FINAL_EXITS:
                print(group.last_line(outcome.process) or f"kformer: error: process {outcome.process} "
                      f"{outcome.cause}", file=err)
        return outcome
    finally:
        group.stop()


def _on_sigterm(handler):
    """Install ``handler`` for SIGTERM (in the main thread; elsewhere nothing) and return the one before."""
    if threading.current_thread() is not threading.main_thread() or handler is None:
        return None
    return signal.signal(signal.SIGTERM, handler)


def _exit_on_sigterm(signum, frame) -> None:
    raise SystemExit(128 + signal.SIGTERM)  # unwinds through Group.stop(): the processes end too


def _descriptor(stream) -> int | None:
    """The file descriptor under a Python stream (None: inherit this process's own). ``kformer``
    points its descriptor 2 at /dev/null and keeps Python's stderr on a copy of it (C++ start-up
    noise); process 0 must write where Python's stderr goes."""
    try:
        stream.flush()
        return stream.fileno()
    except (AttributeError, OSError, ValueError):  # no descriptor (a captured stream)
        return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _usable_cores() -> int:
    from kformer.threads import usable_cores

    return usable_cores()


def _age(path: Path) -> float | None:
    """Seconds since ``path`` was last touched (None: it does not exist)."""
    try:
        return max(time.time() - path.stat().st_mtime, 0.0)
    except OSError:
        return None


def _killed_from_outside(code: int) -> bool:
    """A signal such as the OOM killer's SIGKILL, not SIGABRT (what a process aborts itself with)."""
    return code < 0 and -code != signal.SIGABRT


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _quoted(line: str) -> str:
    return f" ({line})" if line else ""


def _die_with_parent() -> None:
    """In a started process (Linux): SIGKILL it when the launcher dies, however the launcher ends."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
