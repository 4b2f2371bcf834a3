"""The ``diagnostics`` strategy: ``--verify-diagnostics`` runs whose inputs carry random
``expected-error`` and ``expected-error-re`` comments, with invalid regexes and
catastrophically backtracking ones among them, sometimes over ``--split-input-file`` chunks.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from hector_fuzz.base import Environment, Strategy
from hector_fuzz.cases import Case
from hector_fuzz.grammar import SpecModule

__all__ = ["BAD_REGEXES", "DiagnosticsStrategy"]


#: Regexes ``expected-error-re`` must survive: invalid ones, and ones that backtrack
#: catastrophically on a diagnostic of a few dozen characters.
BAD_REGEXES = ["[", "(", ")", "*", "+x", "a{2,1}", "(?P<", "(?<=a+)b", "\\", "[z-a]", "(?",
               "(.*.*)*Z", "(a+)+$", "(\\w+\\s?)+$", "(.*)*!", "(x+x+)+y", "(\\S|\\S)*#",
               "((.)*)*~", "^(([a-z])+.)+[A-Z]([a-z])+$"]  # fmt: skip
_GOOD_REGEXES = [".*", "expected", "[a-z]+", "op", "\\d+", "'.*'", ""]
_TEXTS = ["", "expected", "error", "op", "x" * 200, "{{", "}}", "\\", "'"]


def _expectation(rng: random.Random) -> str:
    kind = rng.choice(["error", "error", "error", "note", "warning", "remark"])
    where = rng.choice(["", "@+1 ", "@-1 ", "@above ", "@below ", "@unknown ", "@+99999 "])
    if rng.random() < 0.7:
        pool = BAD_REGEXES if rng.random() < 0.7 else _GOOD_REGEXES
        body = f"{rng.choice(_TEXTS[:4])}{{{{{rng.choice(pool)}}}}}{rng.choice(_TEXTS[:4])}"
        return f"// expected-{kind}-re {where}{{{{{body}}}}}"
    return f"// expected-{kind} {where}{{{{{rng.choice(_TEXTS)}}}}}"


def _annotate(text: str, rng: random.Random) -> str:
    lines = text.splitlines()
    for _ in range(rng.randint(1, 4)):
        lines.insert(rng.randrange(len(lines) + 1), _expectation(rng))
    return "\n".join(lines) + "\n"


class DiagnosticsStrategy(Strategy):
    """Inputs with random expected-diagnostic comments, run with ``--verify-diagnostics``."""

    name = "diagnostics"
    weight = 1

    def cases(self, rng: random.Random, count: int, env: Environment) -> Iterator[Case]:
        """Cases with flags ``--verify-diagnostics`` (and ``--split-input-file`` at times)."""
        seeds = [s for s in env.seeds if not s.torch]
        for _ in range(count):
            chunks = []
            for _ in range(rng.choice([1, 1, 2, 3])):
                if seeds and rng.random() < 0.5:
                    chunks.append(_annotate(rng.choice(seeds).text, rng))
                else:
                    module = SpecModule(rng, "hector_inter", ill=rng.choice([0.0, 0.3]))
                    chunks.append(_annotate(module.render(rng.randint(1, 4)), rng))
            flags: tuple[str, ...] = ("--verify-diagnostics",)
            if len(chunks) > 1:
                flags += ("--split-input-file",)
            yield Case(0, "diagnostics", "// -----\n".join(chunks), "", flags=flags)
