"""``--verify-diagnostics`` for ``hector-opt``: the ``// expected-<kind> [@where] {{text}}``
comments of an input, split at ``// -----`` as ``--split-input-file`` does, and the matching
of produced diagnostics against them (as MLIR's ``SourceMgrDiagnosticVerifierHandler`` does
for ``mlir-opt``). Lit tests of invalid IR check every diagnostic this way.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import regex  # type: ignore[import-untyped]  # search with a timeout (expected-*-re)

if TYPE_CHECKING:
    from .diagnostics import Diagnostic

SPLIT_MARKER = "// -----"
_SPLIT_LINE = re.compile(r"^\s*// -----\s*$")
_EXPECTED = re.compile(
    r"expected-(?P<kind>error|note|remark|warning)(?P<re>-re)? *"
    r"(?:@(?P<where>[+-][0-9]+|above|below|unknown))? *\{\{(?P<text>.*)\}\}\s*$"
)


@dataclass
class Chunk:
    """One piece of the input, padded with blank lines so its line numbers are the file's."""

    text: str
    first_line: int  # 1-based line of the original file where the chunk starts

    @property
    def padded(self) -> str:
        """The chunk's text after blank lines standing for the lines before it."""
        return "\n" * (self.first_line - 1) + self.text


def split_input(text: str, split: bool) -> list[Chunk]:
    """The whole input, or its ``// -----``-separated chunks when ``split``."""
    if not split:
        return [Chunk(text, 1)]
    chunks: list[Chunk] = []
    lines = text.splitlines(keepends=True)
    start = 0
    for i, line in enumerate(lines):
        if _SPLIT_LINE.match(line):
            chunks.append(Chunk("".join(lines[start:i]), start + 1))
            start = i + 1
    chunks.append(Chunk("".join(lines[start:]), start + 1))
    return chunks


#: Seconds one ``expected-*-re`` regex may take to match one message. The regexes come from
#: the input, and a backtracking one (``(a|aa)+$``) could otherwise run for hours; a sound
#: regex matches a diagnostic in microseconds.
REGEX_TIMEOUT_S = 1.0


@dataclass
class Expected:
    """One ``// expected-<kind> [@where] {{text}}`` comment.

    An ``-re`` expectation's regex is compiled when it is read; ``error`` says why it cannot be
    used (it does not compile, or a match ran past :data:`REGEX_TIMEOUT_S`).
    """

    kind: str
    text: str
    regex: bool
    line: int | None  # None: an unknown location (@unknown)
    comment_line: int
    matched: bool = False
    error: str | None = None
    pattern: Any = None  # the compiled ``regex.Pattern`` of an -re expectation

    def __post_init__(self) -> None:
        if not self.regex:
            return
        # "-re": literal text with {{regex}} parts, as in MLIR and FileCheck.
        parts = re.split(r"\{\{(.*?)\}\}", self.text)
        source = "".join(p if i % 2 else re.escape(p) for i, p in enumerate(parts))
        try:
            self.pattern = regex.compile(source)
        except (regex.error, ValueError, OverflowError, RecursionError) as err:
            self.error = f"invalid regex in expected-{self.kind}-re: {err}"

    def matches(self, message: str) -> bool:
        """Whether ``message`` is the one expected (never when the regex is unusable)."""
        if not self.regex:
            return self.text in message
        if self.pattern is None:
            return False
        try:
            return self.pattern.search(message, timeout=REGEX_TIMEOUT_S) is not None
        except TimeoutError:
            self.error = (
                f"regex in expected-{self.kind}-re took longer than {REGEX_TIMEOUT_S:g} s to "
                "match (catastrophic backtracking?)"
            )
            self.pattern = None
            return False


def parse_expectations(chunk: Chunk) -> list[Expected]:
    """The expected diagnostics a chunk declares, with the line each refers to."""
    expected: list[Expected] = []
    below: list[Expected] = []
    last_plain: int | None = None
    for offset, line in enumerate(chunk.text.splitlines()):
        number = chunk.first_line + offset
        match = _EXPECTED.search(line)
        if match is None:
            last_plain = number
            for e in below:
                e.line = number
            below.clear()
            continue
        where = match.group("where")
        e = Expected(
            match.group("kind"), match.group("text"), match.group("re") is not None, number, number
        )
        if where is None:
            pass
        elif where[0] in "+-":
            e.line = number + int(where)
        elif where == "unknown":
            e.line = None
        elif where == "above":
            e.line = last_plain if last_plain is not None else number - 1
        else:  # below: the next line without an expectation
            below.append(e)
        expected.append(e)
    return expected


def check_expectations(
    expected: list[Expected], produced: list[Diagnostic], name_of: Callable[[str], str]
) -> list[str]:
    """Match produced diagnostics (and their notes) against expectations; return the misses."""
    problems: list[str] = []
    for diag in produced:
        for d in (diag, *diag.notes):
            line = d.line if d.file == "-" else None
            candidates = [
                e
                for e in expected
                if e.kind == d.severity and e.line == line and e.matches(d.message)
            ]
            fresh = [e for e in candidates if not e.matched]
            if fresh or candidates:
                (fresh or candidates)[0].matched = True
            elif d.severity in ("error", "warning"):
                problems.append(f"{d.where(name_of)}: error: unexpected {d.severity}: {d.message}")
    name = name_of("-")
    for e in expected:
        if e.error is not None:
            problems.append(f"{name}:{e.comment_line}: error: {e.error}")
        elif not e.matched:
            where = f"{name}:{e.comment_line}"
            at = "an unknown location" if e.line is None else f"line {e.line}"
            problems.append(
                f'{where}: error: expected {e.kind} "{e.text}" was not produced (at {at})'
            )
    return problems
