"""The fuzzer's data: seeds (the lit tests' inputs), cases, outcomes, results and summaries.

A leaf of :mod:`hector_fuzz`: it imports nothing else of the fuzzer, and every other module of
the fuzzer imports it.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_CORPUS",
    "Case",
    "Outcome",
    "Result",
    "Seed",
    "Summary",
    "load_seeds",
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


# ---- cases ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """One run of ``hector-opt``: the input text, the pipeline (``""``: parse, verify, print),
    whether the input is torch-dialect IR (``--torch``), the strategy that made it and any
    further ``hector-opt`` flags (``--verify-diagnostics``, ``--split-input-file``)."""

    id: int
    origin: str
    text: str
    pipeline: str = ""
    torch: bool = False
    strategy: str = "mutation"
    flags: tuple[str, ...] = ()

    def argv(self, path: str) -> list[str]:
        """``hector-opt``'s arguments for this case on the input file ``path``."""
        args = [path]
        if self.pipeline:
            args += ["-p", self.pipeline]
        if self.torch:
            args.append("--torch")
        return args + list(self.flags)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Case:
        """The case :func:`dataclasses.asdict` wrote as ``data`` (JSON lists back to tuples)."""
        return cls(**{**data, "flags": tuple(data.get("flags", ()))})


@dataclass(frozen=True)
class Result:
    """A case's outcome, exit status (negative: killed by that signal) and output tail."""

    case: Case
    outcome: Outcome
    returncode: int | None
    detail: str


@dataclass
class Summary:
    """Counts of a campaign, per kind of case, per strategy and overall, and the findings."""

    seed: int
    inputs: int  # the mutation strategy's parse-and-verify cases
    pipeline_runs: int  # the mutation strategy's pipeline cases
    counts: dict[str, dict[str, int]]
    per_pipeline: dict[str, dict[str, int]]
    findings: list[dict[str, Any]]
    seconds: float
    commit: str = ""  # the checkout the corpus came from (git HEAD), when known
    cases: int = 0  # every case of the campaign
    strategy_cases: dict[str, int] = field(default_factory=dict)  # cases per strategy
    per_strategy: dict[str, dict[str, int]] = field(default_factory=dict)  # outcomes

    @property
    def defects(self) -> int:
        """Internal errors, crashes and timeouts together."""
        total = self.counts["total"]
        return sum(total.get(o.value, 0) for o in Outcome if o.is_finding)
