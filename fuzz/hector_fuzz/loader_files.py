"""Writing the file sets of the ``loaders`` strategy's recipes (:mod:`hector_fuzz.loaders`):
``.npy`` files byte by byte (so headers can be anything), ``torch.save`` archives rewritten
record by record, triple files in any encoding, IGBH folders with odd names, links and FIFOs.

Each writer returns what a correct reading must give where the recipe describes a valid file
(None where it does not): the oracle :mod:`hector_fuzz.loader_checks` holds the loaders to it.
"""

from __future__ import annotations

import codecs
import os
import pickle
import struct
import warnings
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

__all__ = [
    "DECOY_ROWS",
    "igbh_folder",
    "label_values",
    "npy_bytes",
    "plain_name",
    "torch_file",
    "tsv_bytes",
]

Recipe = dict[str, Any]

#: Rows of the decoy files placed outside an IGBH folder: a count of this many means the loader
#: read one of them.
DECOY_ROWS = 777


def _number(v: Any) -> Any:
    return float(v) if isinstance(v, str) else v


def _fill(rng: np.random.Generator, dtype: np.dtype, shape: tuple[int, ...], r: Recipe) -> bytes:
    """The bytes of an array of ``dtype`` and ``shape`` for the recipe's role and specials."""
    if dtype.kind in "fc":
        a = (rng.standard_normal(shape) * 100).astype(dtype)
    elif dtype.kind in "iumMb":
        top = {"labels": r.get("classes") or 19, "edges": 40}.get(r["role"], 40)
        a = rng.integers(0, top, shape).astype(dtype)
    else:
        a = np.zeros(shape, dtype)
    flat = a.reshape(-1)
    for v in r["specials"]:
        if flat.size:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                try:
                    flat[int(rng.integers(flat.size))] = np.array(_number(v)).astype(dtype)
                except (OverflowError, ValueError, TypeError):
                    pass
    return a.tobytes(order="F" if r["fortran"] is True else "C")


def _dtype(descr: str) -> np.dtype | None:
    try:
        spec: Any = eval(descr, {}) if descr.startswith("[") else descr  # noqa: S307 (literal)
        dtype = np.dtype(spec)
    except (TypeError, ValueError, SyntaxError):
        return None
    return None if dtype.hasobject else dtype


def _header(r: Recipe) -> str:
    descr = r["descr"] if r["descr"].startswith("[") else repr(r["descr"])
    shape = r["shape"]
    shape_text = repr(tuple(shape)) if isinstance(shape, list) else repr(shape)
    fields = {"descr": descr, "fortran_order": repr(r["fortran"]), "shape": shape_text}
    edit = r["header_edit"]
    if edit == "missing_key":
        fields.pop("shape")
    elif edit == "extra_key":
        fields["extra"] = "1"
    body = "{" + ", ".join(f"'{k}': {v}" for k, v in fields.items()) + ", }"
    return {
        "not_a_dict": "[1, 2, 3]",
        "syntax": body[:-3],
        "call": "{'descr': __import__('os').getcwd(), 'fortran_order': False, 'shape': (1,)}",
        "long_padding": body + " " * 70000,
        "latin1": body.replace("}", "'é': 1}"),
    }.get(edit, body)


def npy_bytes(r: Recipe) -> bytes:
    """An ``.npy`` file as the recipe describes it (header fields, version, data length)."""
    rng = np.random.default_rng(r["seed"])
    dtype = _dtype(r["descr"])
    shape = r["shape"]
    sized = all(isinstance(d, int) and 0 <= d <= 4096 for d in shape) and shape != []
    if dtype is not None and sized and dtype.itemsize:
        data = _fill(rng, dtype, tuple(shape), r)
    else:
        data = rng.bytes(64)
    data = {"short": data[: len(data) // 2], "long": data + b"\x01" * 16, "empty": b""}.get(
        r["data"], data
    )
    major, minor = r["version"]
    header = _header(r).encode("utf-8" if major >= 3 else "latin-1", "replace")
    size = struct.Struct("<H" if major == 1 or major > 3 else "<I")
    pad = -(6 + 2 + size.size + len(header) + 1) % 64
    header += b" " * pad + b"\n"
    length = len(header) + (7 if r["header_edit"] == "bad_len" else 0)
    magic = b"\x93NUMPX" if r["header_edit"] == "bad_magic" else b"\x93NUMPY"
    try:
        packed = size.pack(length)
    except struct.error:
        packed = size.pack(0)
    return magic + bytes([major, minor]) + packed + header + data


# ---- torch.save ----------------------------------------------------------------------------


class _Planted:
    """A pickle naming a global (``os.getcwd``): ``weights_only`` loading refuses it."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.getcwd, ())


def _saved_object(r: Recipe) -> tuple[Any, torch.Tensor | None]:
    """(what is saved, the table a correct reading gives or None)."""
    g = torch.Generator().manual_seed(r["seed"])
    dtype = getattr(torch, r["dtype"])
    rows, width = r["shape"]
    if dtype.is_floating_point:
        base = (torch.randn(rows + 4, width, generator=g) * 100).to(dtype)
    else:
        base = torch.randint(-50, 50, (rows + 4, width), generator=g, dtype=dtype)
    table = {"plain": base[:rows].clone(), "view": base[2 : 2 + rows]}.get(r["layout"])
    obj = {
        "transpose": base[:rows].clone().t(),
        "vector": base.reshape(-1)[:rows].clone(),
        "dict": {"x": base},
        "list": [base],
    }.get(r["layout"], table if table is not None else base)
    valid = (
        table is not None
        and dtype in (torch.float16, torch.float32)
        and dtype.itemsize * width % 4 == 0  # the gathers copy 4-byte words
        and r["byteorder"] in ("little", "big", "absent")  # never two records, never junk
    )
    return obj, table if valid else None


def _rewrite(path: Path, r: Recipe, element: int) -> None:
    """Rewrite the archive record by record: byte order, edits (compression, extra, missing,
    duplicate or renamed records), a planted pickle."""
    with zipfile.ZipFile(path) as z:
        entries = [(info, z.read(info)) for info in z.infolist()]
    prefix = entries[0][0].filename.split("/", 1)[0]
    edits, out = r["edits"], []
    for info, data in entries:
        rest = info.filename.split("/", 1)[1]
        if rest == "byteorder":
            if r["byteorder"] == "absent":
                continue
            data = {"big": b"big", "junk": b"middle"}.get(r["byteorder"], data)
            if r["byteorder"] == "twice":
                out.append((info, data))
        elif rest.startswith("data/"):
            if r["byteorder"] == "big" and element > 1:
                data = np.frombuffer(data, f"<u{element}").astype(f">u{element}").tobytes()
            if "drop_storage" in edits:
                continue
            if "compress" in edits:
                info.compress_type = zipfile.ZIP_DEFLATED
            if "rename_storage" in edits:
                info.filename = f"{prefix}/data/7"
            if "duplicate_storage" in edits:
                out.append((info, data))
        elif rest == "data.pkl":
            if "drop_pkl" in edits:
                continue
            if r["layout"] == "planted":
                data = pickle.dumps(_Planted(), protocol=2)
        out.append((info, data))
    extra = {
        "extra_storage": f"{prefix}/data/99",
        "extra_file": f"{prefix}/extra.txt",
        "other_top_folder": "other/data/0",
    }
    with warnings.catch_warnings(), zipfile.ZipFile(path, "w") as z:
        warnings.simplefilter("ignore")  # duplicate names are the point
        for info, data in out:
            z.writestr(info, data)
        for edit, name in extra.items():
            if edit in edits:
                z.writestr(name, b"\x00" * 32)


def torch_file(r: Recipe, path: Path) -> torch.Tensor | None:
    """Write the recipe's ``torch.save`` file to ``path``; the table a correct reading gives
    (None when the file is not a valid feature table)."""
    obj, table = _saved_object(r)
    torch.save(obj, path)
    rewritten = r["byteorder"] != "little" or r["edits"] or r["layout"] == "planted"
    if rewritten:
        _rewrite(path, r, getattr(torch, r["dtype"]).itemsize)
    data = bytearray(path.read_bytes())
    for at, value in r["flips"]:
        if data:
            data[int(at * len(data)) % len(data)] = value
    if r["truncate"] is not None:
        data = data[: int(r["truncate"] * len(data))]
    path.write_bytes(bytes(data))
    damaged = r["flips"] or r["truncate"] is not None or r["edits"]
    return None if damaged else table


# ---- TSV -----------------------------------------------------------------------------------

_BOM_OF = {
    "utf-8": codecs.BOM_UTF8,
    "utf-16-le": codecs.BOM_UTF16_LE,
    "utf-16-be": codecs.BOM_UTF16_BE,
    "utf-32-le": codecs.BOM_UTF32_LE,
    "utf-32-be": codecs.BOM_UTF32_BE,
    "latin-1": codecs.BOM_UTF8,  # a mark of another encoding
}


def tsv_bytes(r: Recipe) -> bytes:
    """A triple file's bytes as the recipe describes it."""
    sep = r["sep"] if r["sep"] is not None else " "
    pad = r["pad"]
    lines = []
    for line in r["lines"]:
        if isinstance(line, list):
            lines.append(sep.join(pad + name + pad for name in line))
        else:
            lines.append(
                {"blank": "  ", "comment": "# note", "short": f"a{sep}b"}.get(line, f"a{sep}{sep}b")
            )
    text = r["newline"].join(lines) + (r["newline"] if r["final_newline"] and lines else "")
    data = bytearray(text.encode(r["encoding"], "replace"))
    if r["bom"]:
        data[:0] = _BOM_OF[r["encoding"]]
    for at, value in r["edits"]:
        if data:
            data[int(at * len(data))] = value
    return bytes(data)


# ---- labels and IGBH folders ---------------------------------------------------------------


def label_values(values: list[Any], dtype: str) -> np.ndarray:
    """The recipe's label values in ``dtype`` (values it cannot hold wrap or saturate as NumPy
    casts them; the oracle reads the file back, so only the bytes matter)."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        out = np.zeros(len(values), dtype)
        for i, v in enumerate(values):
            try:
                out[i] = np.array(_number(v)).astype(dtype)
            except (OverflowError, ValueError, TypeError):
                out[i] = np.array(-1).astype(dtype)
    return out


def plain_name(name: str) -> bool:
    """The path rule a name read from a dataset must follow (written apart from Hector's)."""
    bad = set("/\\\x00")
    return (
        name != ""
        and name[0] != "."
        and not bad & set(name)
        and all(c.isprintable() for c in name)
        and len(name.encode("utf-8", "surrogateescape")) <= 255
    )


def _decoys(tmp: Path) -> None:
    """Files an IGBH loader must never read: next to and outside the dataset folder."""
    (tmp / "outside").mkdir()
    for f in (tmp / "outside" / "node_feat.npy", tmp / "ds" / "node_feat.npy"):
        np.save(f, np.ones((DECOY_ROWS, 4), np.float32))
    edges = np.array([[DECOY_ROWS - 1, 0]], np.int64)
    np.save(tmp / "outside" / "edge_index.npy", edges)
    np.save(tmp / "ds" / "edge_index.npy", edges)


def _features(r: Recipe, folder: Path, rows: int, rng: np.random.Generator) -> np.ndarray | None:
    """Write one node type's feature file; the table a correct reading gives."""
    kind = r["features"]
    if kind == "missing":
        return None
    if kind == "raw":
        x = rng.standard_normal((rows, 1024)).astype(np.float32)
        x.tofile(folder / "node_feat.npy")
        return x
    x = rng.standard_normal((rows, 4)).astype(np.float32)
    if kind == "pt":
        torch.save(torch.from_numpy(x).half(), folder / "node_feat_fp16.pt")
        return x.astype(np.float16)
    np.save(folder / "node_feat.npy", x.astype(">f4") if kind == ">f4" else x)
    return x


def igbh_folder(r: Recipe, tmp: Path) -> dict[str, Any]:
    """Write the recipe's IGBH folder at ``tmp/ds/processed`` (decoys around it); returns the
    features and edges written and whether the folder is valid."""
    rng = np.random.default_rng(r["seed"])
    root = tmp / "ds" / "processed"
    root.mkdir(parents=True)
    _decoys(tmp)
    written: dict[str, Any] = {"features": {}, "edges": {}, "root": root}
    for t, rows in r["types"].items():
        if plain_name(t):
            (root / t).mkdir()
            written["features"][t] = _features(r, root / t, rows, rng)
            labels = rng.integers(0, 19, rows).astype(np.float32)
            np.save(root / t / "node_label_19.npy", labels)
            written.setdefault("labels", {})[t] = labels
    for s, rel, d, e in r["relations"]:
        folder = root / f"{s}__{rel}__{d}"
        folder.mkdir(exist_ok=True)
        high = [r["types"][s], r["types"][d]]
        edges = np.stack([rng.integers(0, high[0], e), rng.integers(0, high[1], e)], 1)
        edges = label_values(list(edges.reshape(-1)), r["edge_dtype"]).reshape(-1, 2)
        for v in r["edge_specials"]:
            if edges.size:
                at = int(rng.integers(edges.size))
                edges.reshape(-1)[at] = label_values([v], r["edge_dtype"])[0]
        np.save(folder / "edge_index.npy", edges)
        written["edges"][folder.name] = edges
    _links(r, tmp, root, written)
    return written


def _links(r: Recipe, tmp: Path, root: Path, written: dict[str, Any]) -> None:
    """Replace a feature or edge file (or a relation folder) by a link or a FIFO."""
    types = [t for t in r["types"] if plain_name(t) and written["features"].get(t) is not None]
    feats = [p for t in types for p in (root / t).glob("node_feat*")]
    edges = [root / name / "edge_index.npy" for name in written["edges"]]
    for link in r["links"]:
        if link in ("feature_out", "feature_in", "fifo_feature", "dangling") and feats:
            target = feats[0]
            if link == "feature_in":
                target.rename(target.with_name("copy" + target.suffix))
                target.symlink_to("copy" + target.suffix)
                continue
            target.unlink()
            if link == "fifo_feature":
                os.mkfifo(target)
            else:
                out = tmp / "outside" / "node_feat.npy" if link == "feature_out" else tmp / "nope"
                target.symlink_to(os.path.relpath(out, target.parent))
        elif link in ("edge_out", "fifo_edge") and edges:
            edges[0].unlink()
            if link == "fifo_edge":
                os.mkfifo(edges[0])
            else:
                outside = tmp / "outside" / "edge_index.npy"
                edges[0].symlink_to(os.path.relpath(outside, edges[0].parent))
        elif link == "relation_out" and edges:
            folder = edges[0].parent
            for f in folder.iterdir():
                f.unlink()
            folder.rmdir()
            folder.symlink_to(tmp / "outside")
