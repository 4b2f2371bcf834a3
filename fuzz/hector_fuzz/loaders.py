"""The ``loaders`` strategy: grammars of the files Hector's dataset and feature loaders read.

Each case is a recipe (JSON, the case's ``text``) for one small file set of one sub-grammar
(the case's ``origin`` is ``loaders/<sub-grammar>``; cases go round the sub-grammars in turn):

``npy``
    ``.npy`` headers: dtype strings in either byte order and of every kind (timedelta, dates,
    booleans, complex, structured, strings, bogus), shapes (negative, huge, extra dims, not
    integers), ``fortran_order``, format versions 1-3 and unknown ones, headers that are not
    dicts or call functions, data cut short or too long; read as features, labels or COO edges.
``torch``
    ``torch.save`` archives: the tensor's type, shape and layout (views, transposes, dicts,
    lists, a pickle naming a global), the byte-order record (little, big, absent, twice,
    junk), the prefix (``data.pt``'s ``data/`` among them), records missing, extra or
    compressed, bytes overwritten and files cut short.
``tsv``
    Triple files: UTF-8/16/32 with and without byte-order marks, the encoding given or not
    (agreeing or not), invalid UTF-8, CR/LF/CRLF line ends, blank, comment and short lines,
    empty fields and odd names.
``igbh``
    IGBH folders: node type and relation names (``..``, leading dots, control characters,
    ``__`` inside), node types given, links leading out of the folder or staying inside,
    FIFOs, edge files of every dtype and ids out of range, feature files of each format.
``labels``
    Label files of every dtype and byte order with values outside the classes (negative,
    ``1e30``, NaN, non-integers, above int64) and node ids outside the table.

The strategy runs its cases itself (:meth:`LoaderStrategy.run`: the file set is written to a
fresh folder and read by the loader; :mod:`hector_fuzz.loader_checks` judges it against NumPy's
or PyTorch's own reading of the same files); ``python3 -m hector_fuzz.loaders CASE.json``
replays one. Generation needs neither NumPy nor PyTorch.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

from hector_fuzz.base import Environment, Strategy
from hector_fuzz.cases import Case

__all__ = ["SUB_GRAMMARS", "LoaderStrategy", "main", "recipe"]

Recipe = dict[str, Any]

# ---- npy -----------------------------------------------------------------------------------

_FLOAT_DESCRS = ["<f4", "<f2", ">f4", ">f2", "=f4"]
_INT_DESCRS = ["<i8", ">i8", "<i4", ">i4", "<u8", "|u1", "<u4", "|i1", ">u2"]
_ODD_DESCRS = [
    "<f8", ">f8", "<m8[s]", ">m8[D]", "<M8[D]", "|b1", "<c8", ">c16", "|V8", "<U3", "|S4",
    "|O", "f4x", "", "<f3", "<i16", "[('a', '<i8')]", "<f4,<f4", "(2,)<i8", ">e",
]  # fmt: skip
_HEADER_EDITS = [None] * 40 + [
    "missing_key", "extra_key", "not_a_dict", "syntax", "call", "long_padding", "bad_len",
    "bad_magic", "latin1",
]  # fmt: skip


def _npy(rng: random.Random) -> Recipe:
    role = rng.choice(["features", "labels", "edges"])
    common = {"features": _FLOAT_DESCRS, "labels": _INT_DESCRS + _FLOAT_DESCRS[:3]}
    descrs = common.get(role, _INT_DESCRS)
    descr = rng.choice(descrs) if rng.random() < 0.75 else rng.choice(_ODD_DESCRS)
    rows = rng.choice([0, 1, 2, 3, 7, 16, 33])
    shape: Any = {
        "features": [rows, rng.choice([1, 2, 4, 6, 8])],
        "labels": [rows],
        "edges": [2, rows],
    }[role]
    if rng.random() < 0.15:
        shape = rng.choice([[-1, 4], [2**40, 8], [rows, 4, 1], [], [1.5], ["a"], [2**63, 2]])
    return {
        "role": role,
        "descr": descr,
        "shape": shape,
        "fortran": rng.choice([False] * 8 + [True, "yes"]),
        "version": rng.choice([[1, 0]] * 10 + [[2, 0], [3, 0], [9, 9]]),
        "header_edit": rng.choice(_HEADER_EDITS),
        "data": rng.choice(["exact"] * 12 + ["short", "long", "empty"]),
        "specials": _specials(rng, role),
        "classes": rng.choice([19, 2983, None]),
        "read": rng.choice(["pread", "mmap"]),
        "seed": rng.randrange(2**31),
    }


def _specials(rng: random.Random, role: str) -> list[Any]:
    """Values planted in an array: out of range for its role, or not numbers at all."""
    pools: dict[str, list[Any]] = {
        "features": ["nan", "inf", 1e38, -0.0, 65504.0],
        "labels": [-1, -3, 18, 19, 500, 2982, 2983, 1e30, "nan", 2.5, 2**63 + 5],
        "edges": [-1, 2**31, 2**31 - 1, 2**63 - 1, 40],
    }
    pool = pools[role]
    return [rng.choice(pool) for _ in range(rng.choice([0, 0, 0, 1, 2]))]


# ---- torch.save ----------------------------------------------------------------------------

_TORCH_EDITS = [
    "compress", "extra_storage", "drop_pkl", "drop_storage", "extra_file", "duplicate_storage",
    "other_top_folder", "rename_storage",
]  # fmt: skip


def _torch(rng: random.Random) -> Recipe:
    damaged = rng.random() < 0.2
    return {
        "name": rng.choice(["data.pt", "node_feat_fp16.pt", "byteorder.pt", "x.pt", "version.pt"]),
        "dtype": rng.choice(["float16", "float32"] * 4 + ["float64", "int32", "bfloat16"]),
        "shape": [rng.choice([0, 1, 3, 12, 40]), rng.choice([1, 2, 4, 8])],
        "layout": rng.choice(["plain"] * 6 + ["view", "view", "transpose", "vector", "dict"]
                             + ["list", "planted"]),
        "byteorder": rng.choice(["little"] * 4 + ["big"] * 4 + ["absent", "junk", "twice"]),
        "edits": rng.sample(_TORCH_EDITS, rng.choice([1, 2])) if rng.random() < 0.25 else [],
        "flips": [[rng.random(), rng.randrange(256)] for _ in range(rng.choice([1, 3]))]
        if damaged and rng.random() < 0.6
        else [],
        "truncate": rng.random() if damaged and rng.random() < 0.3 else None,
        "read": rng.choice(["pread", "mmap"]),
        "seed": rng.randrange(2**31),
    }  # fmt: skip


# ---- TSV -----------------------------------------------------------------------------------

_NAMES = ["a", "b", "c", "paper", "Ä", "名前", "x y", "😀", "#c", "\u00a0n", "\ufeffa", "q\x85"]
_ENCODINGS = ["utf-8"] * 4 + ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be", "latin-1"]
_GIVEN = [None] * 14 + ["utf-8", "utf-8-sig", "utf-16", "utf-16-le", "latin-1", "UTF8", "nope"]


def _tsv(rng: random.Random) -> Recipe:
    lines: list[Any] = []
    for _ in range(rng.choice([0, 1, 3, 3, 6, 6, 12, 12, 20])):
        kind = rng.choices(["triple", "blank", "comment", "short", "empty_field"], [20, 2, 2, 1, 1])
        if kind[0] == "triple":
            lines.append([rng.choice(_NAMES) for _ in range(3)])
        else:
            lines.append(kind[0])
    return {
        "lines": lines,
        "encoding": rng.choice(_ENCODINGS),
        "bom": rng.random() < 0.5,
        "given": rng.choice(_GIVEN),
        "newline": rng.choice(["\n", "\n", "\r\n", "\r"]),
        "sep": rng.choice(["\t", "\t", "\t", None, ","]),
        "pad": rng.choice(["", "", " ", "\t "]),
        "final_newline": rng.random() < 0.8,
        "edits": [[rng.random(), rng.choice([0x80, 0xFF, 0xC3, 0xED, 0x00, 0x0D])]]
        if rng.random() < 0.1
        else [],
    }


# ---- IGBH folders --------------------------------------------------------------------------

_VALID_TYPES = ["paper", "author", "fos", "institute", "$HOME", "ü", "a b", "-", "~"]
_HOSTILE_TYPES = ["..", ".", ".hidden", "x\\y", "tab\tx", "\x7f", "a__b", "\u2028"]
_VALID_RELATIONS = ["cites", "writes", "r", "to"]
_HOSTILE_RELATIONS = ["..", ".r", "a\x01", "."]
_GIVEN_TYPES = ["../x", "a/b", "", "x\x00y", "../../outside", "/abs", "ok", "a" * 300]
_LINKS = ["feature_out", "feature_in", "relation_out", "edge_out", "fifo_feature", "fifo_edge"]


def _igbh(rng: random.Random) -> Recipe:
    hostile = rng.random() < 0.4  # names, links, dtypes and ids that must be refused
    types_pool = _VALID_TYPES + (_HOSTILE_TYPES if hostile else [])
    rels_pool = _VALID_RELATIONS + (_HOSTILE_RELATIONS if hostile else [])
    types = list(dict.fromkeys(rng.choice(types_pool) for _ in range(rng.choice([1, 2, 3]))))
    relations = [
        [rng.choice(types), rng.choice(rels_pool), rng.choice(types), rng.randrange(9)]
        for _ in range(rng.choice([1, 2, 3]))
    ]
    given = None
    if hostile and rng.random() < 0.25:
        given = [*dict.fromkeys(t for s, _, d, _ in relations for t in (s, d))]
        given.insert(rng.randrange(len(given) + 1), rng.choice(_GIVEN_TYPES))
    dtypes = ["<i8", ">i8", "<i4", "<u8"] + (["<m8[s]", "|b1", "<f8", "<M8[D]"] if hostile else [])
    links = [rng.choice(_LINKS + ["dangling"])] if hostile and rng.random() < 0.5 else []
    return {
        "types": {t: rng.choice([1, 3, 8]) for t in types},
        "relations": relations,
        "node_types": given,
        "features": rng.choice(["npy", "npy", "pt", "raw", "missing", ">f4"]),
        "links": links if links or rng.random() < 0.9 else ["feature_in"],
        "edge_dtype": rng.choice(dtypes),
        "edge_specials": _specials(rng, "edges") if hostile else [],
        "classes": rng.choice([19, None]),
        "seed": rng.randrange(2**31),
    }


# ---- labels --------------------------------------------------------------------------------

_LABEL_DTYPES = ["<i8", ">i8", "<i4", "<u8", "|u1", "<f4", ">f4", "<f8", "|b1", "<m8[s]", "<f2"]


def _labels(rng: random.Random) -> Recipe:
    rows = rng.choice([1, 4, 10])
    classes = rng.choice([19, 2983, None])
    top = classes or 50
    values: list[Any] = [rng.randrange(top) for _ in range(rows)]
    for _ in range(rng.choice([0, 1, 2])):
        values[rng.randrange(rows)] = rng.choice(_specials(rng, "labels") or [-1])
    ids = [rng.randrange(rows) for _ in range(rng.choice([1, 3, 8]))]
    if rng.random() < 0.2:
        ids[rng.randrange(len(ids))] = rng.choice([-1, rows, 2**40, -(2**40)])
    return {
        "dtype": rng.choice(_LABEL_DTYPES),
        "values": values,
        "classes": classes,
        "ids": ids,
        "store": rng.choice(["feature", "feature", "igbh", "unified"]),
    }


#: Each sub-grammar's recipe generator, in the order cases go round them.
SUB_GRAMMARS: dict[str, Callable[[random.Random], Recipe]] = {
    "npy": _npy,
    "torch": _torch,
    "tsv": _tsv,
    "igbh": _igbh,
    "labels": _labels,
}


def recipe(case: Case) -> Recipe:
    """The recipe a case of this strategy holds (its sub-grammar under ``grammar``)."""
    data: Recipe = json.loads(case.text)
    return data


class LoaderStrategy(Strategy):
    """File sets for the dataset and feature loaders, judged in this process."""

    name: ClassVar[str] = "loaders"
    input_suffix: ClassVar[str] = ".json"

    def cases(self, rng: random.Random, count: int, env: Environment) -> Iterator[Case]:
        """``count`` recipes, going round the sub-grammars."""
        grammars = list(SUB_GRAMMARS.items())
        for i in range(count):
            sub, make = grammars[i % len(grammars)]
            text = json.dumps({"grammar": sub, **make(rng)}, sort_keys=True)
            yield Case(i, f"loaders/{sub}", text, strategy=self.name)

    def run(self, case: Case, workdir: str) -> tuple[int, str]:
        """Write the case's files under ``workdir`` and judge what the loader makes of them."""
        from hector_fuzz.loader_checks import judge

        return judge(recipe(case), workdir)

    def replay_argv(self, case: Case, path: str) -> list[str]:
        """``python3 -m hector_fuzz.loaders <path>``."""
        return [sys.executable, "-m", "hector_fuzz.loaders", path]


def main(argv: list[str] | None = None) -> int:
    """Replay one case (``python3 -m hector_fuzz.loaders CASE.json``): print the verdict,
    exit with the case's status (0 accepted, 1 clean error, 2 finding)."""
    import tempfile

    from hector_fuzz.loader_checks import judge

    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        sys.stderr.write("usage: python3 -m hector_fuzz.loaders CASE.json\n")
        return 2
    with open(args[0], encoding="utf-8") as f, tempfile.TemporaryDirectory() as tmp:
        rc, message = judge(json.load(f), tmp)
    sys.stderr.write(message + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main())
