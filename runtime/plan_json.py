"""Reading a bundle's ``plan.json``: strict JSON, bounded depth, every value with its path.

:func:`parse_plan` reads the bytes strictly: UTF-8, nesting at most :data:`MAX_JSON_DEPTH`
deep, integers of at most :data:`MAX_INT_DIGITS` digits, no NaN, no number beyond a double;
duplicate keys are kept to be reported with their path. :class:`PlanValue` walks the value it
returns for the validator (:mod:`hector.runtime.bundle_plan`): each accessor checks a type or
a range and fails with a :class:`BundleError` naming the value's JSON path
(``plan.json: functions.f.steps[3].grid[0]: must be ...``).

:class:`BundleError` is the error of every check of a bundle, here and in the modules above.

This module imports only the standard library.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "INT64_MAX",
    "INT64_MIN",
    "MAX_INT_DIGITS",
    "MAX_JSON_DEPTH",
    "NAME",
    "PLAN_FILE",
    "BundleError",
    "PlanValue",
    "parse_plan",
    "shown",
]

PLAN_FILE = "plan.json"
#: Deepest nesting of arrays and objects in ``plan.json`` (a plan needs about 16).
MAX_JSON_DEPTH = 64
#: Most digits of an integer literal in ``plan.json`` (int64 has 19).
MAX_INT_DIGITS = 20
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
#: A name in a plan (a function, a kernel; a key shown as ``.name`` in a path).
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.$]{0,255}")


class BundleError(ValueError):
    """A bundle is malformed, of another version, or cannot run these arguments."""


class _Object(dict[str, Any]):
    """A JSON object that remembers the keys its text repeats (reported with their path)."""

    duplicates: tuple[str, ...] = ()


def _object(pairs: list[tuple[str, Any]]) -> _Object:
    obj = _Object(pairs)
    if len(obj) != len(pairs):
        keys = [k for k, _ in pairs]
        obj.duplicates = tuple(sorted({k for k in keys if keys.count(k) > 1}))
    return obj


def _constant(name: str) -> float:
    """``Infinity`` and ``-Infinity`` (fill values of max/min reductions: the writer's
    ``json.dump`` writes them so), kept for the checks to allow as float32 values only;
    ``NaN`` is refused."""
    if name == "NaN":
        raise BundleError(f"{PLAN_FILE}: NaN is refused (no plan value can be NaN)")
    return -math.inf if name.startswith("-") else math.inf


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise BundleError(f"{PLAN_FILE}: integer {text[:24]}... has more than 20 digits")
    return int(text)


def _json_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise BundleError(f"{PLAN_FILE}: number {text[:24]} is out of range")
    return value


# A string, or an unterminated one to the end (linear: never rescans the text).
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_BRACKETS = re.compile(r"[^\[\]{}]+")
_DEPTH_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def parse_plan(data: bytes) -> Any:
    """The JSON value of ``plan.json``'s bytes: strict UTF-8, no NaN (``Infinity`` is kept for
    the checks to allow as a float32 value only), no number beyond a double, integers of at
    most 20 digits, nesting at most :data:`MAX_JSON_DEPTH` deep; duplicate keys are kept for
    :class:`PlanValue` to report with their path. Anything else is a :class:`BundleError`."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise BundleError(f"{PLAN_FILE}: not UTF-8 (byte {err.start}: {err.reason})") from None
    brackets = _BRACKETS.sub("", _STRING.sub('""', text))
    depth = max(itertools.accumulate(map(_DEPTH_STEP.__getitem__, brackets)), default=0)
    if depth > MAX_JSON_DEPTH:
        raise BundleError(
            f"{PLAN_FILE}: nested {depth} deep; a plan nests at most {MAX_JSON_DEPTH}"
        )
    try:
        return json.loads(
            text,
            object_pairs_hook=_object,
            parse_constant=_constant,
            parse_int=_json_int,
            parse_float=_json_float,
        )
    except (json.JSONDecodeError, RecursionError) as err:
        raise BundleError(f"{PLAN_FILE}: not JSON: {err}") from None


def shown(value: Any) -> str:
    """A JSON value as the plan writes it, cut short."""
    try:
        text = json.dumps(value)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


@dataclass(frozen=True)
class PlanValue:
    """A value of ``plan.json`` and its path there (``functions.f.steps[3].grid[0]``)."""

    value: Any
    path: str = ""

    def fail(self, why: str) -> BundleError:
        """The error ``plan.json: <path>: <why>``."""
        return BundleError(
            f"{PLAN_FILE}: {self.path}: {why}" if self.path else f"{PLAN_FILE}: {why}"
        )

    def expected(self, what: str) -> BundleError:
        """``must be <what>, got <value>``."""
        return self.fail(f"must be {what}, got {shown(self.value)}")

    def item(self, index: int) -> PlanValue:
        """The ``index``-th element of this list."""
        return PlanValue(self.value[index], f"{self.path}[{index}]")

    def key(self, name: str) -> PlanValue:
        """The value of key ``name`` of this object."""
        part = f".{name}" if NAME.fullmatch(name) else f"[{json.dumps(name)}]"
        return PlanValue(self.value[name], f"{self.path}{part}" if self.path else part.lstrip("."))

    def obj(self, required: Sequence[str], optional: Sequence[str] = ()) -> dict[str, PlanValue]:
        """This object's values by key: exactly the keys ``required`` and some of ``optional``
        (an unknown key is an error: it could mean something this executor does not do)."""
        if not isinstance(self.value, dict):
            raise self.expected("an object")
        duplicates = getattr(self.value, "duplicates", ())
        if duplicates:
            raise self.fail(f"duplicate key {duplicates[0]!r}")
        unknown = sorted(k for k in self.value if k not in required and k not in optional)
        if unknown:
            known = ", ".join([*required, *optional])
            raise self.fail(f"unknown key {unknown[0]!r} (plan version 1 has: {known})")
        for name in required:
            if name not in self.value:
                raise self.fail(f"missing key {name!r}")
        return {k: self.key(k) for k in self.value}

    def entries(self) -> list[tuple[str, PlanValue]]:
        """Every (key, value) of an object with keys of its own choosing."""
        if not isinstance(self.value, dict):
            raise self.expected("an object")
        duplicates = getattr(self.value, "duplicates", ())
        if duplicates:
            raise self.fail(f"duplicate key {duplicates[0]!r}")
        return [(k, self.key(k)) for k in self.value]

    def items(self, max_len: int = 1 << 20) -> list[PlanValue]:
        """The elements of this list (at most ``max_len``)."""
        if not isinstance(self.value, list):
            raise self.expected("a list")
        if len(self.value) > max_len:
            raise self.fail(f"has {len(self.value)} elements, at most {max_len} allowed")
        return [self.item(i) for i in range(len(self.value))]

    def as_int(self, lo: int = INT64_MIN, hi: int = INT64_MAX, what: str = "an int") -> int:
        """An integer in ``[lo, hi]`` (``true`` and ``1.0`` are not integers)."""
        v = self.value
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise self.expected(what)
        return v

    def index(self, table: str, size: int) -> int:
        """An index into a table of ``size`` entries (no negative indexing)."""
        return self.as_int(
            0,
            size - 1,
            f"an index into {table} (0 to {size - 1})"
            if size
            else f"an index into {table}, which is empty",
        )

    def as_str(self, pattern: re.Pattern[str] | None = None, what: str = "a string") -> str:
        """A string (matching ``pattern``)."""
        if not isinstance(self.value, str) or (pattern and not pattern.fullmatch(self.value)):
            raise self.expected(what)
        return self.value

    def choice(self, options: Sequence[str]) -> str:
        """One of ``options``."""
        if not isinstance(self.value, str) or self.value not in options:
            raise self.expected("one of " + ", ".join(repr(o) for o in options))
        return self.value

    def as_bool(self) -> bool:
        """``true`` or ``false``."""
        if not isinstance(self.value, bool):
            raise self.expected("true or false")
        return self.value
