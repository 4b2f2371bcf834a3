"""Argument types for the ``hector`` command line: numbers within stated bounds, output paths.

Each validator is an ``argparse`` ``type=``: a value out of range is refused by the parser itself
(``hector ...: error: argument --runs: ...``, exit 2, before any work starts), never accepted to
fail later, overflow, or run for ever. :func:`describe` gives the accepted range for the option's
``--help``, and :func:`add_bounds_to_help` appends it to every option that uses a validator.

Caps are generous for a benchmark on one machine but keep every size inside what the tensors and
the IR can index (``2**31 - 1`` elements per dimension at most).
"""

from __future__ import annotations

import argparse
import math

__all__ = [
    "MAX_DIM",
    "MAX_RUNS",
    "FloatRange",
    "IntList",
    "GpuChip",
    "read_stdin",
    "IntRange",
    "add_bounds_to_help",
]

#: A tensor dimension Hector compiles for (the IR's shapes, int32 indexing of a row).
MAX_DIM = 2**31 - 1
#: Timed runs, steps, warm-up calls, batches of one benchmark.
MAX_RUNS = 100_000
#: Feature widths of a benchmark's layers (a 65536-wide square weight is 16 GiB).
MAX_WIDTH = 65_536
#: Attention heads.
MAX_HEADS = 1_024
#: Threads, workers, processes.
MAX_THREADS = 1_024
#: Seeds (NumPy's legacy generators take up to 2**32 - 1).
MAX_SEED = 2**32 - 1


def _fmt(x: float) -> str:
    if isinstance(x, float) and x.is_integer():
        x = int(x)
    if isinstance(x, int):
        return f"{x:_}" if abs(x) >= 100_000 else str(x)
    return f"{x:g}"


class IntRange:
    """An integer from ``lo`` to ``hi`` (both included)."""

    def __init__(self, lo: int, hi: int) -> None:
        """Accept integers in ``[lo, hi]``."""
        self.lo, self.hi = lo, hi
        self.__name__ = "integer"

    def describe(self) -> str:
        """The accepted range, for ``--help``."""
        return f"integer {_fmt(self.lo)}..{_fmt(self.hi)}"

    def __call__(self, text: str) -> int:
        """The value of ``text``; ``ArgumentTypeError`` unless an integer in range."""
        try:
            value = int(text.strip(), 10)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"must be an integer from {_fmt(self.lo)} to {_fmt(self.hi)}, got {text!r}"
            ) from None
        if not self.lo <= value <= self.hi:
            raise argparse.ArgumentTypeError(
                f"must be from {_fmt(self.lo)} to {_fmt(self.hi)}, got {text.strip()}"
            )
        return value


class FloatRange:
    """A finite number within ``lo``/``hi``; ``lo_open`` makes the lower bound exclusive."""

    def __init__(self, lo: float | None, hi: float | None, *, lo_open: bool = False) -> None:
        """Accept finite numbers ``lo <= x <= hi`` (``lo < x`` with ``lo_open``; None: no
        bound on that side)."""
        self.lo, self.hi, self.lo_open = lo, hi, lo_open
        self.__name__ = "number"

    def describe(self) -> str:
        """The accepted range, for ``--help``."""
        if self.lo is None and self.hi is None:
            return "finite number"
        lo = "" if self.lo is None else f"{_fmt(self.lo)} {'<' if self.lo_open else '<='} "
        hi = "" if self.hi is None else f" <= {_fmt(self.hi)}"
        return f"finite number {lo}x{hi}"

    def __call__(self, text: str) -> float:
        """The value of ``text``; ``ArgumentTypeError`` unless finite and in range."""
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"must be a finite number, got {text.strip()}")
        low_bad = self.lo is not None and (value <= self.lo if self.lo_open else value < self.lo)
        if low_bad or (self.hi is not None and value > self.hi):
            raise argparse.ArgumentTypeError(f"must be a {self.describe()}, got {text.strip()}")
        return value


class IntList:
    """Comma-separated integers, each from ``lo`` to ``hi``, at most ``max_items`` of them;
    returned as the original text (the benchmark parses it), normalized."""

    def __init__(self, lo: int, hi: int, max_items: int = 16) -> None:
        """Accept up to ``max_items`` comma-separated integers in ``[lo, hi]``."""
        self.item = IntRange(lo, hi)
        self.max_items = max_items
        self.__name__ = "integer list"

    def describe(self) -> str:
        """The accepted values, for ``--help``."""
        lo, hi = _fmt(self.item.lo), _fmt(self.item.hi)
        return f"up to {self.max_items} comma-separated integers {lo}..{hi}"

    def __call__(self, text: str) -> str:
        """``text`` normalized; ``ArgumentTypeError`` unless every item is in range."""
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"expected {self.describe()}, got {text!r}")
        if len(items) > self.max_items:
            raise argparse.ArgumentTypeError(f"at most {self.max_items} values, got {len(items)}")
        try:
            values = [self.item(t) for t in items]
        except argparse.ArgumentTypeError as err:
            raise argparse.ArgumentTypeError(f"each value {err}") from None
        return ",".join(str(v) for v in values)


#: Shared instances.
POSITIVE_DIM = IntRange(1, MAX_DIM)
WIDTH = IntRange(1, MAX_WIDTH)
HEADS = IntRange(1, MAX_HEADS)
RUNS = IntRange(1, MAX_RUNS)
WARMUP = IntRange(0, MAX_RUNS)
SEED = IntRange(0, MAX_SEED)
THREADS = IntRange(1, MAX_THREADS)
THREADS_OR_AUTO = IntRange(0, MAX_THREADS)
SCALE = FloatRange(0.0, 100.0, lo_open=True)
GIB = FloatRange(0.0, 1_048_576.0, lo_open=True)  # up to 1 PiB
SECONDS = FloatRange(0.0, 7 * 24 * 3600.0, lo_open=True)  # up to a week
FRACTION = FloatRange(0.0, 1.0)
REPEATS = IntRange(1, 1_000)
LAYERS = IntRange(1, 1_024)
SEQ = IntRange(1, 1_048_576)
BATCH = IntRange(1, 16_777_216)
VOCAB = IntRange(1, 16_777_216)
CLASSES = IntRange(1, 1_048_576)
RAW_MIB = IntRange(1, 1_048_576)  # up to 1 TiB
PROBES = IntRange(1, 1_000)
WIDTHS = IntList(1, MAX_WIDTH, max_items=32)
FANOUTS = IntList(-1, 1_000_000, max_items=8)  # -1: every neighbour
PROCS = IntList(1, 256, max_items=16)


def read_stdin() -> str:
    """Standard input as UTF-8 text, whatever the locale; ``ValueError`` saying where the
    first byte that is not UTF-8 stands (the locale's error handler would hand MLIR's parser
    lone surrogates instead)."""
    import sys

    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise ValueError(
            f"standard input is not UTF-8 text (line {line}, byte {err.start}: {err.reason})"
        ) from None


class GpuChip:
    """``--chip``: a GPU architecture Hector compiles for (``sm_90``, ``sm_100a``, ...: the
    keys of ``hector.lowering.pipelines.GPU_CHIP_MIN_PTX``)."""

    __name__ = "GPU architecture"

    def describe(self) -> str:
        """The accepted names, for ``--help``."""
        return "an NVPTX architecture from sm_50 on"

    def __call__(self, text: str) -> str:
        """``text`` when Hector compiles for it; ``ArgumentTypeError`` naming those it does."""
        from ..lowering.pipelines import check_gpu_chip

        try:
            return check_gpu_chip(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None


def add_bounds_to_help(parser: argparse.ArgumentParser) -> None:
    """Append each validated option's accepted range to its ``--help`` text."""
    for action in parser._actions:
        describe = getattr(action.type, "describe", None)
        if describe is None or action.help == argparse.SUPPRESS:
            continue
        bound = describe()
        text = action.help or ""
        if bound not in text:
            action.help = f"{text} [{bound}]".strip()
