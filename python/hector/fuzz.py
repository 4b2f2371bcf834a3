"""A mutation fuzzer for Hector's IR tools: ``python3 -m hector.fuzz --inputs N --pipelines M``.

Seeds are the lit tests' inputs (``test/**/*.mlir``, split on ``// -----``, comment lines
dropped). Each case mutates one seed a few times — numbers, attribute values, types, op names,
SSA operands, whole lines — and runs it the way a user would: through ``hector-opt``'s parse,
``hector-verify`` and print (an *input*), or through one named pipeline or Hector pass (a
*pipeline run*; torch-dialect seeds go through the torch-context passes with ``--torch``).

Cases run in worker processes that call ``hector.opt.main`` in-process, many cases each, so a
run is fast; the parent hands a worker one case at a time and waits with a timeout, so a case
that aborts the process (a C++ assertion) or hangs is caught exactly: the worker is replaced
and the case replayed alone through the ``hector-opt`` command to record what it prints.

Every case ends in one :class:`Outcome`: ``accepted`` (exit 0), ``clean_error`` (exit 1 with
diagnostics), ``internal_error`` (a Python traceback, exit 2, an "internal error" diagnostic,
or an accepted case whose output ``hector-opt`` rejects when it reads it back), ``crash`` (the
process died: a signal or exit status >= 128) or ``timeout``. The last three are findings: each
is written to the output folder as the input file plus the command that replays it, and
``summary.json`` holds the counts.
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import io
import json
import os
import random
import re
import shlex
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, as_completed, wait
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "Case",
    "Outcome",
    "Result",
    "Summary",
    "WorkerPool",
    "classify",
    "load_seeds",
    "main",
    "make_cases",
    "mutate",
    "run_campaign",
    "run_case",
]

#: The repository's lit tests, the default seed corpus.
DEFAULT_CORPUS = Path(__file__).resolve().parents[2] / "test"
_SPLIT = re.compile(r"^\s*// -----\s*$", re.MULTILINE)


class Outcome(enum.StrEnum):
    """How one case ended."""

    ACCEPTED = "accepted"
    CLEAN_ERROR = "clean_error"
    INTERNAL_ERROR = "internal_error"
    CRASH = "crash"
    TIMEOUT = "timeout"

    @property
    def is_finding(self) -> bool:
        """Whether this outcome is a defect of Hector's (never acceptable on any input)."""
        return self in (Outcome.INTERNAL_ERROR, Outcome.CRASH, Outcome.TIMEOUT)


# ---- seeds ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Seed:
    """One ``// -----`` chunk of a lit test; ``torch`` when it is torch-dialect IR."""

    origin: str  # path:chunk
    text: str
    torch: bool


def load_seeds(corpus: Path) -> list[Seed]:
    """Every chunk of every ``.mlir`` file under ``corpus`` (lit's ``Output`` folders skipped),
    with comment-only lines dropped, in a stable order."""
    seeds = []
    for path in sorted(corpus.rglob("*.mlir")):
        if "Output" in path.parts:
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        for i, chunk in enumerate(_SPLIT.split(text)):
            code = "\n".join(
                line for line in chunk.splitlines() if not line.lstrip().startswith("//")
            ).strip()
            if code:
                torch = "!torch." in code or "torch.aten" in code
                seeds.append(Seed(f"{path.relative_to(corpus)}:{i}", code + "\n", torch))
    return seeds


# ---- mutation ------------------------------------------------------------------------------

_NUMBER = re.compile(r"(?<![\w%#@!^.])-?\d+(\.\d+)?(e[-+]?\d+)?(?![\w.])")
_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')
_SSA = re.compile(r"%[\w$.\-]+(#\d+)?")
_SCALAR_TYPE = re.compile(r"\b(f16|bf16|f32|f64|i1|i8|i16|i32|i64|index)\b")
_DIMS = re.compile(r"(?<=[<x])(\?|\d+)(?=x)")
_SHAPED = re.compile(r"\b(?:tensor|memref|vector)<[^<>]*>")
_ATTR_DICT = re.compile(r"\{(?=\s*[\w.]+\s*=)")
_GENERIC_OP_END = re.compile(r'"\w+\.\w+"\([^()]*\)(?= :)')
_ARGUMENT_END = re.compile(r"%[\w]+: [^,(){}]+?(?=[,)])")

_NUMBERS = [
    "0", "1", "-1", "2", "3", "7", "8", "16", "255", "256", "1024", "1025", "65536",
    "2147483647", "2147483648", "-2147483648", "4294967296", "9223372036854775807",
    "9223372036854775808", "-9223372036854775808", "18446744073709551616", "0.0", "-0.0",
    "1.5", "1e308", "1e400", "-1e400", "0x7FC00000", "0xFFFFFFFF",
]  # fmt: skip
_TYPES = [
    "f16", "bf16", "f32", "f64", "i1", "i8", "i16", "i32", "i64", "index", "none",
    "tensor<?xf32>", "tensor<*xf32>", "memref<?xi32>", "!hector_inter.graph", "complex<f32>",
    "vector<4xf32>", "tuple<>", "i0", "ui32", "si64",
]  # fmt: skip
_ATTRS = [
    "unit", "0 : i64", "-1 : i64", "1 : i32", "9223372036854775807 : i64", "1.0 : f32",
    '"x"', '""', "[]", "[1, 2]", "{}", "array<i32: 1, 2>", "array<i64>", "array<index: 1>",
    "array<i1: true>", "array<f32: 1.0>", "dense<1.0> : tensor<2xf32>", "dense<> : tensor<0xi32>",
    "dense<[1, 2]> : tensor<2xindex>", "@sym", "affine_map<(d0) -> (d0)>", "f32", "none",
    'dense_resource<blob> : tensor<2xi32>', "#hector_inter.nothing", 'loc("x":1:2)',
]  # fmt: skip
_NAMES = [
    "slice", "fn", "variant", "epilogue", "block_size", "tile_n", "reduce", "parallel",
    "hector.kind", "hector.fuse", "operandSegmentSizes", "slope", "heads", "sym_name",
    "function_type", "placement.write_bandwidth", "placement.forward_ns", "slice_rows",
    "placement.run_on", "hector.num_nodes", "hector.num_etypes", "align", "hector.outputs",
]  # fmt: skip


@dataclass
class _Vocabulary:
    """Words seen in the corpus, for mutations that swap one for another of its kind."""

    strings: list[str] = field(default_factory=list)
    op_names: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, seeds: Sequence[Seed]) -> _Vocabulary:
        strings: set[str] = set()
        ops: set[str] = set()
        lines: set[str] = set()
        for seed in seeds:
            for s in _STRING.findall(seed.text):
                (ops if re.fullmatch(r'"\w+\.\w+"', s) else strings).add(s)
            ops.update(re.findall(r"\b(?:func|arith|memref|linalg|scf|tensor)\.\w+", seed.text))
            lines.update(line for line in seed.text.splitlines() if len(line) < 400)
        return cls(sorted(strings), sorted(ops), sorted(lines))


def _replace_match(text: str, pattern: re.Pattern[str], rng: random.Random, new: str) -> str:
    matches = list(pattern.finditer(text))
    if not matches:
        return text
    m = rng.choice(matches)
    return text[: m.start()] + new + text[m.end() :]


def _mut_number(text: str, rng: random.Random, vocab: _Vocabulary) -> str:
    return _replace_match(text, _NUMBER, rng, rng.choice(_NUMBERS))


def _mut_string(text: str, rng: random.Random, vocab: _Vocabulary) -> str:
    pool = vocab.strings + vocab.op_names + ['""', '"\\00"', '"' + "x" * 300 + '"']
    return _replace_match(text, _STRING, rng, rng.choice(pool))


def _mut_type(text: str, rng: random.Random, vocab: _Vocabulary) -> str:
    return _replace_match(text, _SCALAR_TYPE, rng, rng.choice(_TYPES))


def _mut_dim(text: str, rng: random.Random, vocab: _Vocabulary) -> str:
    """Change one dimension of a shaped type, usually everywhere that type is written (so the
    input still parses and reaches the verifier and the passes)."""
    shapes = sorted(set(_SHAPED.findall(text)))
    if not shapes:
        return text
    old = rng.choice(shapes)
    new = _replace_match(old, _DIMS, rng, rng.choice(["?", "0", "1", "2", "3", "16", "1025"]))
    if rng.random() < 0.3:
        new = old.replace("f32", rng.choice(["f16", "f64", "i32", "index"]))
    if rng.random() < 0.7:
        return text.replace(old, new)
    return _replace_match(text, re.compile(re.escape(old)), rng, new)


def _mut_op_name(text: str, rng: random.Random, vocab: _Vocabulary) -> str:
    names = re.compile(r'"\w+\.\w+"(?=\()|\b(?:func|arith|memref|linalg|scf|tensor)\.\w+')
    new = rng.choice(vocab.op_names) if vocab.op_names else '"test.op"'
    if not new.startswith('"') and text.count('"') and rng.random() < 0.5:
        new = f'"{new}"'
    return _replace_match(text, names, rng, new)


def _mut_ssa(text: str, rng: random.Random, vocab: _Vocabulary) -> str:
    names = sorted(set(_SSA.findall(text)) | {m.group() for m in _SSA.finditer(text)})
    return _replace_match(text, _SSA, rng, rng.choice(names)) if names else text


def _mut_swap_operands(text: str, rng: random.Random, vocab: _Vocabulary) -> str:
    pairs = list(re.finditer(r"(%[\w$.\-]+), (%[\w$.\-]+)", text))
    if not pairs:
        return text
    m = rng.choice(pairs)
    return text[: m.start()] + f"{m.group(2)}, {m.group(1)}" + text[m.end() :]


def _mut_attribute(text: str, rng: random.Random, vocab: _Vocabulary) -> str:
    """Add an attribute (a name Hector reads, an odd value) to an op, a function or one of
    its arguments."""
    entry = f"{rng.choice(_NAMES)} = {rng.choice(_ATTRS)}"
    where = rng.choice([_ATTR_DICT, _GENERIC_OP_END, _ARGUMENT_END])
    matches = list(where.finditer(text))
    if not matches:
        return text
    m = rng.choice(matches)
    new = entry + ", " if where is _ATTR_DICT else " {" + entry + "}"
    return text[: m.end()] + new + text[m.end() :]


def _mut_lines(text: str, rng: random.Random, vocab: _Vocabulary) -> str:
    lines = text.splitlines()
    if len(lines) < 2:
        return text
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    action = rng.choice(["drop", "duplicate", "swap", "splice"])
    if action == "drop":
        del lines[i]
    elif action == "duplicate":
        lines.insert(j, lines[i])
    elif action == "swap":
        lines[i], lines[j] = lines[j], lines[i]
    elif vocab.lines:
        lines.insert(i, rng.choice(vocab.lines))
    return "\n".join(lines) + "\n"


def _mut_truncate(text: str, rng: random.Random, vocab: _Vocabulary) -> str:
    return text[: rng.randrange(len(text) + 1)] if text else text


_MUTATIONS: list[Callable[[str, random.Random, _Vocabulary], str]] = [
    _mut_number, _mut_number, _mut_string, _mut_type, _mut_dim, _mut_dim, _mut_op_name,
    _mut_ssa, _mut_swap_operands, _mut_attribute, _mut_lines, _mut_lines, _mut_truncate,
]  # fmt: skip


def mutate(text: str, rng: random.Random, vocab: _Vocabulary, count: int) -> str:
    """``text`` after ``count`` random mutations drawn from ``rng``."""
    for _ in range(count):
        text = rng.choice(_MUTATIONS)(text, rng, vocab)
    return text


# ---- cases ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One run of ``hector-opt``: the input text, the pipeline (``""``: parse, verify, print)
    and whether the input is torch-dialect IR (``--torch``)."""

    id: int
    origin: str
    text: str
    pipeline: str = ""
    torch: bool = False

    def argv(self, path: str) -> list[str]:
        """``hector-opt``'s arguments for this case on the input file ``path``."""
        args = [path]
        if self.pipeline:
            args += ["-p", self.pipeline]
        if self.torch:
            args.append("--torch")
        return args


def pipelines() -> tuple[list[str], list[str]]:
    """(pipelines for Hector-dialect input, pipelines for torch-dialect input): every named
    pipeline and every registered pass (option edge values: :func:`option_variants`)."""
    from hector.opt import _load_passes
    from hector.passes._registry import MLIR_CONTEXT, PASSES, PIPELINES

    _load_passes()
    hector = sorted(PIPELINES)
    torch: list[str] = []
    for name, info in sorted(PASSES.items()):
        # convert-torch-to-linalg-cpu runs in Hector's context but reads torch IR (--torch).
        takes_torch = info.context != MLIR_CONTEXT or name.startswith("convert-torch-")
        (torch if takes_torch else hector).append(name)
    return hector, torch


def option_variants() -> list[str]:
    """Every registered pass with each option set to edge values (bounds, out of range,
    malformed): each must run or be refused with a clean error."""
    from hector.opt import _load_passes
    from hector.passes._registry import PASSES

    _load_passes()
    return [
        f"{name}{{{key}={value}}}"
        for name, info in sorted(PASSES.items())
        for key, option in info.options.items()
        for value in _option_values(option)
    ]


def _option_values(option: Any) -> list[str]:
    if option.type is bool:
        return ["true", "maybe"]
    if option.choices:
        return [str(c) for c in option.choices] + ["bogus"]
    return ["0", "-1", "1", "1025", "99999999999999999999", "nan", "x"]


def make_cases(seeds: Sequence[Seed], inputs: int, pipeline_runs: int, seed: int) -> Iterator[Case]:
    """``inputs`` parse-and-verify cases, then ``pipeline_runs`` pipeline cases, reproducible
    from ``seed``. Pipeline cases mutate less (one mutation, or none for a quarter of them), so
    most inputs get past the verifier into the passes."""
    rng = random.Random(seed)
    vocab = _Vocabulary.of(seeds)
    hector_pipes, torch_pipes = pipelines()
    variants = option_variants()
    # Pipelines start from the valid seeds (the tests of invalid input stop at the verifier).
    valid = [s for s in seeds if "invalid" not in s.origin and "Inputs" not in s.origin]
    plain = [s for s in valid if not s.torch]
    torch = [s for s in valid if s.torch]
    for i in range(inputs):
        s = rng.choice(seeds if rng.random() < 0.3 else valid)
        yield Case(i, s.origin, mutate(s.text, rng, vocab, rng.randint(1, 3)), "", s.torch)
    for i in range(inputs, inputs + pipeline_runs):
        use_torch = bool(torch) and rng.random() < 0.1
        s = rng.choice(torch if use_torch else plain)
        pipeline = rng.choice(torch_pipes if use_torch else hector_pipes)
        if rng.random() < 0.1:
            pipeline = rng.choice(variants)
            use_torch = pipeline.startswith(tuple(torch_pipes))
            s = rng.choice(torch if use_torch and torch else plain)
        text = s.text if rng.random() < 0.25 else mutate(s.text, rng, vocab, 1)
        yield Case(i, s.origin, text, pipeline, use_torch)


# ---- running -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    """A case's outcome, exit status (negative: killed by that signal) and output tail."""

    case: Case
    outcome: Outcome
    returncode: int | None
    detail: str


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
    return [sys.executable, "-m", "hector.fuzz", "--worker"]


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
HECTOR_OPT = (sys.executable, "-m", "hector.opt")


def replay(case: Case, timeout: float, command: Sequence[str] = HECTOR_OPT) -> Result:
    """Run ``case`` alone through ``command`` (``hector-opt``) in its own process."""
    with tempfile.TemporaryDirectory(prefix="hector-fuzz-") as tmp:
        path = os.path.join(tmp, "input.mlir")
        Path(path).write_text(case.text, encoding="utf-8")
        try:
            proc = subprocess.run(
                [*command, *case.argv(path)], capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            return Result(case, Outcome.TIMEOUT, None, "")
    return Result(
        case, classify(proc.returncode, proc.stderr), proc.returncode, proc.stderr[-4000:]
    )


def worker_main() -> int:
    """The worker loop: read cases (JSON lines) from stdin, run each through
    ``hector.opt.main`` in this process, answer ``{"rc", "stderr"}`` per case.

    An accepted case's output is read back through ``hector-opt`` (parse + hector-verify): IR
    that Hector prints but then rejects is an internal error too (silently invalid output)."""
    from hector import opt

    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # whatever MLIR prints itself must not corrupt the answers
    opt._load_passes()
    with tempfile.TemporaryDirectory(prefix="hector-fuzz-") as tmp:
        path, output = os.path.join(tmp, "input.mlir"), os.path.join(tmp, "output.mlir")
        for line in sys.stdin:
            rc, err = run_case(opt.main, Case(**json.loads(line)), path, output)
            answers.write(json.dumps({"rc": rc, "stderr": err[-4000:]}) + "\n")
            answers.flush()
    return 0


def run_case(
    entry: Callable[[list[str]], int], case: Case, path: str, output: str
) -> tuple[int, str]:
    """(exit status, stderr) of ``case`` run through ``entry`` (``hector.opt.main``) in this
    process, its input written to ``path``; an accepted case's output (written to ``output``)
    must read back through ``entry``, or :data:`READ_BACK_FAILED` is added to stderr."""
    Path(path).write_text(case.text, encoding="utf-8")
    rc, out, err = _run_in_process(entry, case.argv(path))
    if rc == 0 and not case.torch:  # torch-context output mixes dialects: no read-back
        Path(output).write_text(out, encoding="utf-8")
        back, _, back_err = _run_in_process(entry, [output])
        if back != 0:
            err += f"{READ_BACK_FAILED}:\n{back_err}"
    return rc, err


#: What a worker reports when an accepted case's output does not read back.
READ_BACK_FAILED = "hector.fuzz: internal error: the output is rejected when read back"


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


# ---- campaigns -----------------------------------------------------------------------------


@dataclass
class Summary:
    """Counts of a campaign, per kind of case and overall, and the findings' files."""

    seed: int
    inputs: int
    pipeline_runs: int
    counts: dict[str, dict[str, int]]
    per_pipeline: dict[str, dict[str, int]]
    findings: list[dict[str, Any]]
    seconds: float
    commit: str = ""  # the checkout the corpus came from (git HEAD), when known

    @property
    def defects(self) -> int:
        """Internal errors, crashes and timeouts together."""
        total = self.counts["total"]
        return sum(total.get(o.value, 0) for o in Outcome if o.is_finding)


def run_campaign(
    *,
    inputs: int,
    pipeline_runs: int,
    seed: int,
    out: Path | None,
    workers: int = 2,
    timeout: float = 60.0,
    corpus: Path = DEFAULT_CORPUS,
    command: Sequence[str] | None = None,
    replay_command: Sequence[str] | None = None,
    progress: Callable[[int], None] | None = None,
) -> Summary:
    """Fuzz ``inputs`` parse-and-verify cases and ``pipeline_runs`` pipeline cases; write each
    finding (input file + replay command) and ``summary.json`` under ``out`` (when given).

    ``command`` and ``replay_command`` replace the worker and ``hector-opt`` commands (tests).
    """
    start = time.monotonic()
    seeds = load_seeds(corpus)
    if not seeds:
        raise ValueError(f"no seed inputs (*.mlir) under {corpus}")
    counts: dict[str, Counter[str]] = {"inputs": Counter(), "pipelines": Counter()}
    per_pipeline: dict[str, Counter[str]] = {}
    findings: list[dict[str, Any]] = []
    pool = WorkerPool(workers, timeout, command=command, replay_command=replay_command)
    try:
        for done, result in enumerate(pool.map(make_cases(seeds, inputs, pipeline_runs, seed))):
            kind = "pipelines" if result.case.pipeline else "inputs"
            counts[kind][result.outcome.value] += 1
            if result.case.pipeline:
                name = result.case.pipeline
                per_pipeline.setdefault(name, Counter())[result.outcome.value] += 1
            if result.outcome.is_finding:
                findings.append(_record(result, out))
            if progress is not None:
                progress(done + 1)
    finally:
        pool.close()
    total = counts["inputs"] + counts["pipelines"]
    summary = Summary(
        seed,
        inputs,
        pipeline_runs,
        {k: dict(sorted(v.items())) for k, v in (*counts.items(), ("total", total))},
        {k: dict(sorted(v.items())) for k, v in sorted(per_pipeline.items())},
        sorted(findings, key=lambda f: f["id"]),
        round(time.monotonic() - start, 1),
        _git_head(corpus),
    )
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "summary.json").write_text(json.dumps(asdict(summary), indent=2) + "\n")
    return summary


def _git_head(folder: Path) -> str:
    try:
        proc = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return proc.stdout.strip() if proc.returncode == 0 else ""


def _record(result: Result, out: Path | None) -> dict[str, Any]:
    """A finding's entry in the summary; its input file under ``out``."""
    case = result.case
    entry: dict[str, Any] = {
        "id": case.id,
        "outcome": result.outcome.value,
        "origin": case.origin,
        "pipeline": case.pipeline,
        "returncode": result.returncode,
        "message": _first_error(result.detail),
    }
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"{result.outcome.value}-{case.id}.mlir"
        path.write_text(case.text, encoding="utf-8")
        entry["input"] = path.name
        entry["command"] = shlex.join(["hector-opt", *case.argv(str(path))])
        (out / f"{result.outcome.value}-{case.id}.txt").write_text(
            entry["command"] + "\n\n" + result.detail, encoding="utf-8"
        )
    return entry


def _first_error(stderr: str) -> str:
    for line in stderr.splitlines():
        if "internal error" in line or "Assertion" in line or "Error" in line:
            return line.strip()[:300]
    return stderr.strip().splitlines()[-1][:300] if stderr.strip() else ""


# ---- command line --------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python3 -m hector.fuzz",
        description="Mutation-fuzz hector-opt (parse/verify and every pipeline) from the lit "
        "tests' inputs; exit 1 when any case crashes, times out or errs internally.",
    )
    p.add_argument("--inputs", type=int, default=500, help="parse-and-verify cases")
    p.add_argument("--pipelines", type=int, default=100, help="pipeline cases")
    p.add_argument("--seed", type=int, default=0, help="random seed (a run is reproducible)")
    p.add_argument("--out", type=Path, default=None, help="folder for findings + summary.json")
    p.add_argument("--workers", type=int, default=max(1, min(4, os.cpu_count() or 1)))
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per case")
    p.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help="folder of seed .mlir")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python3 -m hector.fuzz``; returns the exit status."""
    args = _parser().parse_args(argv)
    if args.worker:
        return worker_main()
    if args.inputs < 0 or args.pipelines < 0 or args.workers < 1 or args.timeout <= 0:
        sys.stderr.write("hector.fuzz: counts must be >= 0, workers >= 1, timeout > 0\n")
        return 2
    total = args.inputs + args.pipelines

    def progress(done: int) -> None:
        if done % 500 == 0 or done == total:
            sys.stderr.write(f"hector.fuzz: {done}/{total} cases\n")

    try:
        summary = run_campaign(
            inputs=args.inputs,
            pipeline_runs=args.pipelines,
            seed=args.seed,
            out=args.out,
            workers=args.workers,
            timeout=args.timeout,
            corpus=args.corpus,
            progress=progress,
        )
    except (OSError, ValueError) as err:
        sys.stderr.write(f"hector.fuzz: error: {err}\n")
        return 2
    print(json.dumps({"counts": summary.counts, "seconds": summary.seconds}, indent=2))
    for f in summary.findings:
        print(
            f"{f['outcome']}: case {f['id']} ({f['origin']}, -p {f['pipeline']!r}): {f['message']}"
        )
    return 1 if summary.defects else 0


if __name__ == "__main__":
    sys.exit(main())
