"""Running the fuzzer's cases: in-process in worker processes, or alone through ``hector-opt``,
and classifying how each ended.

Cases run in worker processes (``python3 -m hector_fuzz --worker``) that call
``hector.tools.opt.main`` in-process, many cases each, so a run is fast; the parent hands a worker
one case at a time and waits with a timeout, so a case that aborts the process (a C++ assertion) or
hangs is caught exactly: the worker is replaced and the case replayed alone through the
``hector-opt`` command to record what it prints.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, as_completed, wait
from dataclasses import asdict
from pathlib import Path

from hector_fuzz.cases import Case, Outcome, Result
from hector_fuzz.strategies import STRATEGIES

__all__ = [
    "HECTOR_OPT",
    "READ_BACK_FAILED",
    "WorkerPool",
    "classify",
    "replay",
    "run_case",
    "worker_main",
]


def classify(returncode: int | None, stderr: str) -> Outcome:
    """The outcome of a ``hector-opt`` run from its exit status and stderr (``None``: it
    did not finish in time)."""
    if returncode is None:
        return Outcome.TIMEOUT
    if returncode < 0 or returncode >= 128:
        return Outcome.CRASH
    if returncode == 2 or "Traceback (most recent call last)" in stderr:
        return Outcome.INTERNAL_ERROR
    if "internal error" in stderr:
        return Outcome.INTERNAL_ERROR
    return Outcome.ACCEPTED if returncode == 0 else Outcome.CLEAN_ERROR


def _worker_command() -> list[str]:
    return [sys.executable, "-m", "hector_fuzz", "--worker"]


class _Worker:
    """One worker process: runs cases in-process, one JSON line in, one JSON line out."""

    def __init__(self, command: Sequence[str]) -> None:
        env = dict(os.environ, HECTOR_DEBUG="1")
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        self.used = 0

    def run(self, case: Case, timeout: float) -> tuple[int, str] | None:
        """(exit status, stderr) of ``case``, or ``None`` when the worker died on it or did
        not answer within ``timeout`` seconds (then it is stopped; the caller replays the case
        alone)."""
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        stdout = self.proc.stdout
        self.used += 1
        try:
            self.proc.stdin.write(json.dumps(asdict(case)) + "\n")
            self.proc.stdin.flush()
        except OSError:
            self.close()
            return None
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(stdout.readline()), daemon=True)
        reader.start()
        reader.join(timeout)
        if reader.is_alive() or not line or not line[0]:
            self.close()
            return None
        reply = json.loads(line[0])
        return int(reply["rc"]), str(reply["stderr"])

    def close(self) -> None:
        """Stop the worker (killed if it does not exit at once)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


class WorkerPool:
    """``size`` workers, each replaced after ``recycle`` cases (bounding leaks) or a death."""

    def __init__(
        self,
        size: int,
        timeout: float,
        *,
        command: Sequence[str] | None = None,
        replay_command: Sequence[str] | None = None,
        recycle: int = 300,
    ) -> None:
        self.timeout = timeout
        self.command = list(command or _worker_command())
        self.replay_command = list(replay_command or HECTOR_OPT)
        self.recycle = recycle
        self.size = size
        self._idle: list[_Worker] = []
        self._lock = threading.Lock()

    def _take(self) -> _Worker:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return _Worker(self.command)

    def _give(self, worker: _Worker) -> None:
        if worker.proc.poll() is not None or worker.used >= self.recycle:
            worker.close()
            return
        with self._lock:
            self._idle.append(worker)

    def run(self, case: Case) -> Result:
        """Run one case; a worker that died on it is replaced and the case replayed alone."""
        worker = self._take()
        answer = worker.run(case, self.timeout)
        self._give(worker)
        if answer is None:
            return replay(case, self.timeout, self.replay_command)
        rc, stderr = answer
        return Result(case, classify(rc, stderr), rc, stderr[-4000:])

    def map(self, cases: Iterator[Case]) -> Iterator[Result]:
        """Run ``cases`` on the pool's workers; results in completion order."""
        with ThreadPoolExecutor(self.size) as threads:
            pending: set[Future[Result]] = set()
            for case in cases:
                pending.add(threads.submit(self.run, case))
                if len(pending) >= 4 * self.size:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    yield from (f.result() for f in done)
            for future in as_completed(pending):
                yield future.result()

    def close(self) -> None:
        """Stop every idle worker."""
        with self._lock:
            for worker in self._idle:
                worker.close()
            self._idle.clear()


#: The command a case is replayed with alone: ``hector-opt`` of this interpreter.
HECTOR_OPT = (sys.executable, "-m", "hector.tools.opt")


def replay_argv(case: Case, path: str, command: Sequence[str] = HECTOR_OPT) -> list[str]:
    """The command that runs ``case`` alone on its input file ``path``: its strategy's own
    (:meth:`~hector_fuzz.base.Strategy.replay_argv`), else ``command`` (``hector-opt``)."""
    strategy = STRATEGIES.get(case.strategy)
    own = strategy.replay_argv(case, path) if strategy is not None else None
    return own if own is not None else [*command, *case.argv(path)]


def input_suffix(case: Case) -> str:
    """The suffix of ``case``'s input file (``.mlir`` unless its strategy says otherwise)."""
    strategy = STRATEGIES.get(case.strategy)
    return strategy.input_suffix if strategy is not None else ".mlir"


def replay(case: Case, timeout: float, command: Sequence[str] = HECTOR_OPT) -> Result:
    """Run ``case`` alone through ``command`` (``hector-opt``, or the command of a strategy
    that runs its own cases) in its own process."""
    with tempfile.TemporaryDirectory(prefix="hector-fuzz-") as tmp:
        path = os.path.join(tmp, "input" + input_suffix(case))
        Path(path).write_text(case.text, encoding="utf-8")
        try:
            proc = subprocess.run(
                replay_argv(case, path, command), capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            return Result(case, Outcome.TIMEOUT, None, "")
    return Result(
        case, classify(proc.returncode, proc.stderr), proc.returncode, proc.stderr[-4000:]
    )


def worker_main() -> int:
    """The worker loop: read cases (JSON lines) from stdin, run each through
    ``hector.tools.opt.main`` in this process (or its strategy's own :meth:`run`), answer
    ``{"rc", "stderr"}`` per case.

    An accepted case's output is read back through ``hector-opt`` (parse + hector-verify): IR
    that Hector prints but then rejects is an internal error too (silently invalid output)."""
    from hector.tools import opt

    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # whatever MLIR prints itself must not corrupt the answers
    opt._load_passes()
    with tempfile.TemporaryDirectory(prefix="hector-fuzz-") as tmp:
        path, output = os.path.join(tmp, "input.mlir"), os.path.join(tmp, "output.mlir")
        for line in sys.stdin:
            case = Case.from_json(json.loads(line))
            strategy = STRATEGIES.get(case.strategy)
            own = strategy.run(case, tmp) if strategy is not None else None
            rc, err = own if own is not None else run_case(opt.main, case, path, output)
            answers.write(json.dumps({"rc": rc, "stderr": err[-4000:]}) + "\n")
            answers.flush()
    return 0


def run_case(
    entry: Callable[[list[str]], int], case: Case, path: str, output: str
) -> tuple[int, str]:
    """(exit status, stderr) of ``case`` run through ``entry`` (``hector.tools.opt.main``) in this
    process, its input written to ``path``; an accepted case's output (written to ``output``)
    must read back through ``entry``, or :data:`READ_BACK_FAILED` is added to stderr."""
    Path(path).write_text(case.text, encoding="utf-8")
    rc, out, err = _run_in_process(entry, case.argv(path))
    # Torch-context output mixes dialects, and --verify-diagnostics prints no IR: no read-back.
    if rc == 0 and not case.torch and "--verify-diagnostics" not in case.flags:
        Path(output).write_text(out, encoding="utf-8")
        split = [f for f in case.flags if f == "--split-input-file"]
        back, _, back_err = _run_in_process(entry, [output, *split])
        if back != 0:
            err += f"{READ_BACK_FAILED}:\n{back_err}"
    return rc, err


#: What a worker reports when an accepted case's output does not read back.
READ_BACK_FAILED = "hector_fuzz: internal error: the output is rejected when read back"


def _run_in_process(entry: Callable[[list[str]], int], argv: list[str]) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of ``entry(argv)`` run in this process."""
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = entry(argv)
    except SystemExit as exit_:
        rc = exit_.code if isinstance(exit_.code, int) else 1
    except BaseException:  # noqa: BLE001  (anything escaping main is what we are looking for)
        import traceback

        return 2, out.getvalue(), err.getvalue() + traceback.format_exc()
    return rc, out.getvalue(), err.getvalue()
