"""Checks on input MLIR text that run before MLIR's parser sees it.

MLIR's parser reports most malformed input as a diagnostic, but some input makes it abort the
whole process instead (a C++ assertion, ``LLVM ERROR``, or a stack overflow). Every place that
parses text from outside Hector (``hector-opt``, ``hector compile FILE``, ``hector.compile`` on
text, plan files, torch-dialect input) runs :func:`source_problems` first, through
:func:`hector.passes.module_text.parse_module` or :func:`check_source`, and refuses such input with
a located error. What is refused:

* input larger than :data:`MAX_SOURCE_BYTES`;
* brackets (``(``, ``[``, ``{``, ``<``, all kinds together) nested deeper than
  :data:`MAX_NESTING`: the parser recurses once per level and overflows the C++ stack;
* ``dialect_resources`` blobs that are not hex strings with a 4-byte little-endian alignment
  that is a power of two up to :data:`MAX_BLOB_ALIGNMENT` (alignment 0 aborts with "out of
  memory");
* dense array attributes of ``index`` elements (``array<index: 1>``);
* generic ops named by a dialect alone (``"gpu"()``), unless unregistered dialects are allowed;
* complex literals ``(re, im)`` in ``dense<...>``/``sparse<...>`` whose element type is not
  ``complex<...>`` (MLIR builds the attribute from one value too many per literal and asserts),
  except the one form MLIR accepts: ``dense<(a, b)>`` alone on a type of exactly 2 elements;
* numeric literals longer than :data:`MAX_NUMBER_LENGTH` characters: MLIR converts decimal
  integers in quadratic time (100,000 digits take minutes).

``external_resources`` sections are not checked: no handler is registered for them in
Hector's contexts, so MLIR skips them with a warning.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "MAX_BLOB_ALIGNMENT",
    "MAX_NESTING",
    "MAX_NUMBER_LENGTH",
    "MAX_SOURCE_BYTES",
    "SourceProblem",
    "UnsafeSourceError",
    "check_source",
    "source_problems",
]

#: Deepest bracket nesting accepted (all kinds combined). MLIR's parser recurses once or more
#: per level and overflows an 8 MiB stack at a few thousand levels (nested ``module {`` and
#: ``[`` crash at 10,000). Real IR stays far below: Hector's deepest lit test nests 5 levels,
#: and MLIR's printer nests one level per region, attribute or type constructor. 256 leaves
#: room for generated IR and keeps a 10x margin for threads with smaller stacks.
MAX_NESTING = 256

#: Largest input accepted, in bytes of UTF-8. The biggest IR Hector handles (a model with its
#: weights as hex ``dense<"0x...">`` constants) is a few tens of MiB; beyond this bound MLIR
#: parsing takes minutes and gigabytes, and every resource blob is bounded by it too.
MAX_SOURCE_BYTES = 256 * 1024 * 1024

#: Largest resource blob alignment accepted. MLIR allocates each blob with its alignment;
#: element types need at most 64 bytes, while huge alignments reserve that much address space
#: per blob.
MAX_BLOB_ALIGNMENT = 4096

#: Longest numeric literal accepted (integer or float, decimal or hex), in characters. MLIR's
#: APInt parses decimal digits in quadratic time (10,000 digits: 5 s; 100,000: minutes). The
#: widest literal Hector needs is far shorter: an i1024 takes 309 decimal digits (plus sign),
#: a hex f128 34 characters, and MLIR's printer writes floats in exponent form. Identifiers,
#: strings and attribute dictionaries parse in linear time and are left to MAX_SOURCE_BYTES.
MAX_NUMBER_LENGTH = 512

# What the checks need of MLIR's lexical structure, found in one regex pass: strings and
# comments (skipped whole, so brackets inside them do not count), the file-metadata brackets
# ``{-#`` and ``#-}``, ``->`` and ``>=`` (not closing angle brackets), type alias definitions
# (``!t =``), ``loc(`` and ``array<``, and single brackets. Everything else (identifiers, SSA
# names, numbers) is skipped, which keeps the scan fast on large inputs (~2 s for 10 MB).
_ID_CHAR = r"[\w$.\-%@#!^]"
_TOKEN = re.compile(
    rf"""(?=["/{{#\-<>()\[\]!lads}}])  # fails fast where no token can start
    (?:(?P<string>"(?:[^"\\\n]|\\.)*")
    |(?P<comment>//[^\n]*)
    |(?P<meta_open>\{{-\#)
    |(?P<meta_close>\#-\}})
    |(?P<skip>->|>=)
    |(?P<alias>!(?<!{_ID_CHAR}!)[A-Za-z0-9_$.\-]+(?=\s*=))
    |(?P<loc>l(?<!{_ID_CHAR}l)oc\s*\()
    |(?P<array>a(?<!{_ID_CHAR}a)rray(?:\s|//[^\n]*)*<)
    |(?P<elements>(?<!{_ID_CHAR})(?:dense|sparse)\s*<)
    |(?P<open>[(\[{{<])
    |(?P<close>[)\]}}>]))""",
    re.VERBOSE,
)
# Full tokens, for the file metadata only: strings, comments, bare or prefixed words, numbers
# and single punctuation.
_META_TOKEN = re.compile(
    r"""(?P<string>"(?:[^"\\\n]|\\.)*")
    |(?P<comment>//[^\n]*)
    |(?P<word>[%@#!^]?[A-Za-z0-9_$.\-]+)
    |(?P<punct>\S)""",
    re.VERBOSE,
)
_WORD_AFTER = re.compile(r"(?:\s|//[^\n]*)*([%@#!^]?[A-Za-z0-9_$.\-]+)")  # comments are blank
_OP_OPENER_AFTER = re.compile(r"(?:\s|//[^\n]*)*[(<]")
_WORD_BEFORE = re.compile(rf"(?<!{_ID_CHAR})([A-Za-z_][\w$.]*)\s*$")
# Long numeric literals. _LONG_RUN finds whether the text has any run of more than
# MAX_NUMBER_LENGTH word characters that starts with a digit (looked at from each run's start
# only, so linear); only then does _LONG_NUMBER look for them outside strings and comments: a
# digit not inside an identifier (``%x99``, ``i64``, a shape's ``x99``), followed by at least
# MAX_NUMBER_LENGTH number characters, where _NUMBER then measures the literal.
_LONG_RUN = re.compile(rf"(?<![\w.])[0-9][\w.]{{{MAX_NUMBER_LENGTH}}}")
_LONG_NUMBER = re.compile(
    rf"""(?=["/0-9])
    (?:"(?:[^"\\\n]|\\.)*"
    |//[^\n]*
    |(?P<number>(?<![\w$.%@#!^])(?<![\w$.\-%@#!^]-)[0-9][\w.]{{{MAX_NUMBER_LENGTH}}}))""",
    re.VERBOSE,
)
# How far an elements attribute's element type is looked for: in a type alias's definition,
# or on the line before an attribute whose type comes from its op (bounds the work per
# attribute, so the scan stays linear).
_LOOK_AROUND = 4096
_NUMBER = re.compile(r"0x[0-9A-Fa-f]*|[0-9]+(?:\.[0-9]*(?:[eE][+\-]?[0-9]+)?)?")
_TYPE_WORD = re.compile(r"!?[A-Za-z0-9_$.\-]*")
_ALIAS_REF = re.compile(r"![A-Za-z0-9_$.\-]+")
_SHAPE = re.compile(r"\s*:\s*(?:tensor|vector|memref)\s*<\s*((?:[0-9]+\s*x\s*)*)")
_CLOSERS = {")": "(", "]": "[", "}": "{", ">": "<"}

# Custom-form ops whose syntax has a string followed by ``(`` (a callee or constraint name,
# ``emitc.call_opaque "f"(%x)``): after their name such a string is not a generic op.
_STRING_CALLEE_OPS = frozenset(
    name
    for full in (
        "emitc.call_opaque",
        "llvm.call_intrinsic",
        "pdl.apply_native_constraint",
        "pdl.apply_native_rewrite",
        "pdl.operation",
        "pdl_interp.apply_constraint",
        "pdl_interp.apply_rewrite",
    )
    for name in (full, full.partition(".")[2])
)


@dataclass(frozen=True)
class SourceProblem:
    """Input text MLIR's parser cannot take safely: ``message`` at ``line``:``column`` (1-based)."""

    message: str
    line: int
    column: int


class UnsafeSourceError(ValueError):
    """Input text :func:`check_source` refused; ``problems`` says where and why."""

    def __init__(self, filename: str, problems: list[SourceProblem]) -> None:
        self.filename = filename
        self.problems = problems
        super().__init__("\n".join(self.lines()))

    def lines(self) -> list[str]:
        """One ``file:line:col: error: message`` line per problem."""
        return [f"{self.filename}:{p.line}:{p.column}: error: {p.message}" for p in self.problems]


def check_source(text: str, filename: str = "-", *, allow_unregistered: bool = False) -> None:
    """Raise :class:`UnsafeSourceError` (naming ``filename``) when ``text`` holds anything
    :func:`source_problems` finds; the guard for parsers other than Hector's context (whose
    parse goes through :func:`hector.passes.module_text.parse_module`)."""
    problems = source_problems(text, allow_unregistered=allow_unregistered)
    if problems:
        raise UnsafeSourceError(filename, problems)


def source_problems(text: str, *, allow_unregistered: bool = False) -> list[SourceProblem]:
    """What in ``text`` would make MLIR's parser abort the process instead of reporting an error
    (see the module docstring for the list). Generic op names without an op part are accepted
    when ``allow_unregistered`` (MLIR then takes them as unregistered ops)."""
    size = len(text.encode("utf-8", errors="surrogatepass"))
    if size > MAX_SOURCE_BYTES:
        message = f"input is {size} bytes; at most {MAX_SOURCE_BYTES} bytes of MLIR are accepted"
        return [SourceProblem(message, 1, 1)]
    return _Scanner(_blank_comments(text), allow_unregistered).run()


_STRING_OR_COMMENT = re.compile(r'"(?:[^"\\\n]|\\.)*"|//[^\n]*')


def _blank_comments(text: str) -> str:
    """``text`` with each comment (outside strings) replaced by as many spaces: MLIR's lexer
    takes a comment as white space anywhere between tokens (``array // c`` + newline +
    ``<index: 1>``), and offsets, lines and columns stay those of ``text``."""
    if "//" not in text:
        return text
    return _STRING_OR_COMMENT.sub(
        lambda m: m.group() if m.group()[0] == '"' else " " * len(m.group()), text
    )


_COMPLEX_ELEMENTS = (
    "elements attributes of complex element type are not supported (MLIR's Python bindings "
    "abort the process reading them); Hector's dialects have no complex values"
)
_COMPLEX_LITERAL = (
    "complex literal '(re, im)' in an elements attribute whose element type is not complex "
    "(MLIR's parser would abort on it); use a complex<...> element type or one value per element"
)

_INDEX_ARRAY = (
    "dense array attributes cannot hold 'index' elements (MLIR's parser would abort on them); "
    "use a sized integer type, e.g. array<i64: ...>"
)


class _Scanner:
    """One pass over the brackets and strings of a text, collecting :class:`SourceProblem` s."""

    def __init__(self, text: str, allow_unregistered: bool) -> None:
        self.text = text
        self.allow_unregistered = allow_unregistered
        self.problems: list[tuple[int, str]] = []  # (offset, message)
        # Open brackets, innermost last: "(", "[", "{", "<", "{-#", and "loc" for ``loc(``.
        self.stack: list[str] = []
        # How many open brackets are ones no op can appear in (``<``, ``[``, ``loc(``, ``{-#``).
        self.not_ops = 0
        self.aliases: dict[str, str] = {}
        self.index_arrays: list[tuple[str, int]] = []  # (element type word, offset)
        self.meta_start = -1  # offset of the open ``{-#``, -1 outside file metadata
        self.alias_text: dict[str, str] = {}  # type alias -> its definition, to the line end
        # The open ``dense<``/``sparse<``: [stack depth of its ``<``, offset, ``(`` count].
        self.elements: list | None = None
        # Closed elements attributes: (offset, offset after ``>``, ``(`` count).
        self.elements_attrs: list[tuple[int, int, int]] = []

    def run(self) -> list[SourceProblem]:
        text = self.text
        if _LONG_RUN.search(text):
            self._check_numbers()
        for m in _TOKEN.finditer(text):
            kind, start = m.lastgroup, m.start()
            if kind == "string":
                if self._may_start_op(start) and _OP_OPENER_AFTER.match(text, m.end()):
                    self._check_op_name(m.group(), start)
            elif kind in ("open", "loc", "array", "meta_open", "elements"):
                opener = {"loc": "loc", "array": "<", "elements": "<", "meta_open": "{-#"}.get(
                    kind, m.group()
                )
                if opener == "(" and self.elements is not None:
                    self.elements[2] += 1
                if not self._push(opener, m.end() - 1 if kind != "meta_open" else start):
                    return self._finish()
                if kind == "array":
                    word = _WORD_AFTER.match(text, m.end())
                    if word is not None:
                        self.index_arrays.append((word.group(1), word.start(1)))
                elif kind == "meta_open":
                    self.meta_start = start
                elif kind == "elements" and self.elements is None:
                    self.elements = [len(self.stack), start, 0]
            elif kind == "close":
                self._close_end = m.end()
                self._close(m.group())
            elif kind == "meta_close":
                if "{-#" in self.stack:
                    self._close("{-#")
                    self._check_metadata(self.meta_start + 3, m.end())
            elif kind == "alias" and not self.stack:
                word = _WORD_AFTER.match(text, text.index("=", m.end()) + 1)
                if word is not None:
                    self.aliases[m.group()] = word.group(1)
                    # Its definition to the line end, at most _LOOK_AROUND characters.
                    begin = word.start()
                    line_end = text.find("\n", begin, begin + _LOOK_AROUND)
                    end = begin + _LOOK_AROUND if line_end < 0 else line_end
                    self.alias_text[m.group()] = text[begin:end]
        if self.meta_start >= 0:  # unclosed: MLIR reads its blobs before it notices
            self._check_metadata(self.meta_start + 3, len(text))
        return self._finish()

    def _check_numbers(self) -> None:
        text = self.text
        for m in _LONG_NUMBER.finditer(text):
            start = m.start("number")
            if start < 0:
                continue
            number = _NUMBER.match(text, start)  # always matches: ``start`` is a digit
            length = (number.end() if number else start) - start
            if length > MAX_NUMBER_LENGTH:
                self._report(
                    start,
                    f"numeric literal of {length} characters; at most {MAX_NUMBER_LENGTH} "
                    "are accepted (MLIR's parser takes quadratic time on long numbers)",
                )

    def _finish(self) -> list[SourceProblem]:
        for start, end, parens in self.elements_attrs:
            if _mentions_complex(self._element_type_text(start, end), self.alias_text):
                self._report(start, _COMPLEX_ELEMENTS)
            elif parens and not self._complex_literal_ok(start, end, parens):
                self._report(start, _COMPLEX_LITERAL)
        for word, start in self.index_arrays:
            if _resolve_alias(word, self.aliases) == "index":
                self._report(start, _INDEX_ARRAY)
        # Offsets to lines and columns in one pass over the text (linear in all problems).
        problems, line, line_start, counted = [], 1, 0, 0
        for offset, message in sorted(self.problems, key=lambda p: p[0]):
            newlines = self.text.count("\n", counted, offset)
            if newlines:
                line += newlines
                line_start = self.text.rfind("\n", counted, offset) + 1
            counted = offset
            problems.append(SourceProblem(message, line, offset - line_start + 1))
        return problems

    def _push(self, opener: str, offset: int) -> bool:
        """Open a bracket; False (and a problem) when brackets nest deeper than the bound."""
        self.stack.append(opener)
        self.not_ops += opener != "(" and opener != "{"
        if len(self.stack) <= MAX_NESTING:
            return True
        self._report(
            offset,
            f"nesting deeper than {MAX_NESTING} levels of brackets (all kinds together); "
            "MLIR's parser would overflow its stack",
        )
        return False

    _close_end = 0  # offset after the closer being handled

    def _close(self, closer: str) -> None:
        """Close the innermost bracket ``closer`` matches, with any unmatched ``<`` inside it
        (a comparison in some custom syntax); a ``>`` closes only a ``<``, and a closer with
        no opener is ignored."""
        want = _CLOSERS.get(closer, closer)
        if closer == ">":
            if self.stack and self.stack[-1] == "<":
                self._pop()
            return
        for i in range(len(self.stack) - 1, -1, -1):
            if self.stack[i] == want or (want == "(" and self.stack[i] == "loc"):
                while len(self.stack) > i:
                    self._pop()
                return

    def _pop(self) -> None:
        if self.elements is not None and len(self.stack) == self.elements[0]:
            _, start, parens = self.elements
            self.elements = None
            # The offset after ``>`` is found from the closer just matched.
            self.elements_attrs.append((start, self._close_end, parens))
        opener = self.stack.pop()
        self.not_ops -= opener != "(" and opener != "{"

    def _element_type_text(self, start: int, end: int) -> str:
        """The type text of the elements attribute at ``start`` (ending before ``end``): the
        ``: type`` after it, else the text before it on its line (``memref.global``)."""
        text = self.text
        type_match = re.match(r"\s*:\s*", text[end : end + 64])
        if type_match is None:  # type from the context (``memref.global``): look on the line
            line_start = text.rfind("\n", max(0, start - _LOOK_AROUND), start) + 1
            return text[max(line_start, start - _LOOK_AROUND) : start]
        return _type_text(text, end + type_match.end())

    def _complex_literal_ok(self, start: int, end: int, parens: int) -> bool:
        """Whether ``(`` inside the elements attribute at ``start`` (ending before ``end``) of a
        type that is not complex is one MLIR's parser takes: ``dense<(a, b)>`` alone on a static
        type of exactly 2 elements (MLIR reads that as the two values)."""
        text = self.text
        if parens != 1 or not text.startswith("dense", start):
            return False
        body = text[text.index("<", start) + 1 : end - 1].strip()
        if not (body.startswith("(") and body.endswith(")")):
            return False
        shape = _SHAPE.match(text, end)
        if shape is None:
            return False
        count = 1
        for dim in re.findall(r"[0-9]+", shape.group(1)):
            count *= int(dim)
        return count == 2

    def _may_start_op(self, start: int) -> bool:
        """Whether a string at ``start`` can name an op in generic form: in a region (or at the
        top level), not inside an attribute, type, location or the file metadata, not a quoted
        symbol name (``@"f"``) and not a custom op's callee (``emitc.call_opaque "f"(...)``)."""
        if self.allow_unregistered or self.not_ops or (self.stack and self.stack[-1] != "{"):
            return False
        if start and self.text[start - 1] in "@%^!#":
            return False
        before = _WORD_BEFORE.search(self.text, max(0, start - 80), start)
        return before is None or before.group(1) not in _STRING_CALLEE_OPS

    def _check_op_name(self, literal: str, start: int) -> None:
        name = _unescape(literal[1:-1])
        if name.partition(".")[2] == "":
            self._report(start, f"operation name '{name}' has no op part (expected 'dialect.op')")

    def _check_metadata(self, begin: int, end: int) -> None:
        """Check the blobs of ``{-# dialect_resources: {dialect: {key: "0x..."}} #-}``."""
        self.meta_start = -1
        depth, section = 0, ""
        last: list[str] = ["", ""]  # the two previous tokens
        for m in _META_TOKEN.finditer(self.text, begin, end):
            kind, word = m.lastgroup, m.group()
            if kind == "comment":
                continue
            if word == "{":
                depth += 1
            elif word == "}":
                depth -= 1
            elif word == ":" and depth == 0:
                section = last[-1]
            elif kind == "string" and last[-1] == ":" and depth == 2:
                if section == "dialect_resources":
                    self._check_blob(last[-2].strip('"'), word, m.start())
            last = [last[-1], word]

    def _check_blob(self, key: str, literal: str, start: int) -> None:
        """A ``dialect_resources`` value: ``"0x"``, 4 bytes of alignment, then the data (MLIR
        reads the literal's spelling, without escapes)."""
        digits = literal[1:-1]
        if not digits.startswith("0x") or not re.fullmatch(r"(?:[0-9A-Fa-f]{2})*", digits[2:]):
            message = f"resource blob '{key}' must be a hex string \"0x...\" of whole bytes"
            self._report(start, message)
            return
        if len(digits) < 10:
            message = f"resource blob '{key}' must start with its alignment (4 bytes)"
            self._report(start, message)
            return
        alignment = int.from_bytes(bytes.fromhex(digits[2:10]), "little")
        has_data = len(digits) > 10
        power_of_two = alignment & (alignment - 1) == 0
        # MLIR takes alignment 0 for an empty blob, and allocates any other blob with it.
        if (alignment or has_data) and not (power_of_two and 1 <= alignment <= MAX_BLOB_ALIGNMENT):
            self._report(
                start,
                f"resource blob '{key}' has alignment {alignment}: its first 4 bytes "
                f"(little-endian) must be a power of two from 1 to {MAX_BLOB_ALIGNMENT}",
            )

    def _report(self, offset: int, message: str) -> None:
        self.problems.append((offset, message))


def _unescape(body: str) -> str:
    r"""A string literal's contents as MLIR reads them (``\XX`` hex, ``\n``, ...)."""
    simple = {"n": "\n", "t": "\t", '"': '"', "\\": "\\"}
    return re.sub(
        r"\\([0-9A-Fa-f]{2}|.)",
        lambda m: simple.get(m.group(1), chr(int(m.group(1), 16)) if len(m.group(1)) == 2 else ""),
        body,
    )


def _resolve_alias(word: str, aliases: dict[str, str]) -> str:
    """``word`` with type aliases (``!t = index``) followed; cycles stop where they close."""
    seen = set()
    while word in aliases and word not in seen:
        seen.add(word)
        word = aliases[word]
    return word


def _type_text(text: str, start: int) -> str:
    """The type written at ``start``: an alias or keyword with its ``<...>`` brackets."""
    word = _TYPE_WORD.match(text, start)
    end = word.end() if word else start
    if end < len(text) and text[end] == "<":
        depth = 0
        for i in range(end, min(len(text), end + _LOOK_AROUND)):
            c = text[i]
            if c == "<":
                depth += 1
            elif c == ">" and text[i - 1] != "-":
                depth -= 1
                if depth == 0:
                    return text[start : i + 1]
        return text[start : end + _LOOK_AROUND]
    return text[start:end]


def _mentions_complex(type_text: str, alias_text: dict[str, str]) -> bool:
    """Whether ``type_text`` names ``complex``, directly or through type aliases."""
    pending, seen = [type_text], set()
    while pending:
        current = pending.pop()
        if "complex" in current:
            return True
        for name in _ALIAS_REF.findall(current):
            if name not in seen and name in alias_text:
                seen.add(name)
                pending.append(alias_text[name])
    return False
