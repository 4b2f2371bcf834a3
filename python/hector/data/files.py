"""Datasets from files: triple files (:func:`load_triples`) and directories of NumPy COO arrays,
one ``<rel>_coo*.npy`` per relation (:func:`load_coo_dir`; the ogbn-mag sample's schema is
:data:`MAG_SAMPLE_RELATIONS`).

Bad files raise :class:`~hector.data.dataset.DatasetError` naming the file, line or entry; sizes are
checked (:class:`~hector.data.dataset.DatasetLimitError`) before anything of that size is allocated.
"""

from __future__ import annotations

import codecs
import os
import struct
import tokenize
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Literal

import numpy as np
import torch

from .dataset import (
    Dataset,
    DatasetError,
    DatasetLimitError,
    check_dataset_size,
    dataset_count,
    with_inverse_relations,
)
from .limits import MAX_COUNT

__all__ = ["MAG_SAMPLE_RELATIONS", "load_coo_dir", "load_triples"]


#: Byte-order marks and the encoding family each names (UTF-32's little-endian mark starts
#: with UTF-16's, so it is tried first).
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
#: The codec that reads a file starting with each family's mark (and drops the mark).
_BOM_CODECS = {"utf-8": "utf-8-sig", "utf-16": "utf-16", "utf-32": "utf-32"}


def _encoding_family(encoding: str) -> str:
    """``utf-8``, ``utf-16`` or ``utf-32`` for any spelling or byte order of those, else the
    codec's own name; LookupError for an unknown encoding."""
    name = codecs.lookup(encoding).name
    return "utf-8" if name == "utf-8-sig" else name[:6] if name.startswith("utf-") else name


def text_encoding(path: Path, encoding: str | None) -> str:
    """The codec to read a text file with: with ``encoding`` None, the one its byte-order mark
    names (UTF-8, UTF-16 or UTF-32, the mark dropped), else UTF-8; a given ``encoding`` must
    agree with a mark the file starts with. DatasetError naming the file otherwise."""
    try:
        with path.open("rb") as f:
            head = f.read(4)
        family = _encoding_family(encoding) if encoding is not None else None
    except LookupError:
        raise DatasetError(f"unknown text encoding {encoding!r} for '{path}'") from None
    except OSError as err:
        raise DatasetError(f"cannot read triple file '{path}': {err.strerror or err}") from None
    marked = next((fam for bom, fam in _BOMS if head.startswith(bom)), None)
    if encoding is None:
        return _BOM_CODECS[marked] if marked is not None else "utf-8"
    if marked is not None and marked != family:
        raise DatasetError(
            f"'{path}' starts with a {marked.upper()} byte-order mark, but encoding="
            f"{encoding!r}; pass encoding=None to read the encoding the mark names"
        )
    return encoding


def _text_lines(path: Path, encoding: str) -> Iterator[tuple[int, str]]:
    """``(line number, line)`` of a text file, a byte-order mark at its start dropped;
    DatasetError naming the file and line on an unreadable file or bytes that are not text in
    ``encoding``."""
    hint = "pass encoding= to read another encoding"
    lineno = 0
    try:
        # surrogateescape keeps undecodable bytes so the exact line and byte can be reported
        with path.open(encoding=encoding, errors="surrogateescape") as f:
            for lineno, line in enumerate(f, 1):
                if lineno == 1:  # a mark the codec keeps (utf-8, utf-16-le, ...)
                    line = line.removeprefix("\ufeff")
                if not line.isascii():
                    try:
                        line.encode(encoding)
                    except UnicodeEncodeError as err:
                        bad = ord(line[err.start])
                        what = f"byte 0x{bad - 0xDC00:02x}" if bad >= 0xDC80 else f"U+{bad:04X}"
                        raise DatasetError(
                            f"{path}:{lineno}: not {encoding} text ({what} at column "
                            f"{err.start + 1}); {hint}"
                        ) from None
                yield lineno, line
    except UnicodeError as err:  # what surrogateescape cannot carry (UTF-16 input, no BOM)
        reason = err.reason if isinstance(err, UnicodeDecodeError) else err
        raise DatasetError(f"{path}:{lineno + 1}: not {encoding} text ({reason}); {hint}") from None
    except LookupError:
        raise DatasetError(f"unknown text encoding {encoding!r} for '{path}'") from None
    except OSError as err:
        raise DatasetError(f"cannot read triple file '{path}': {err.strerror or err}") from None


def load_triples(
    path: str | os.PathLike[str],
    *,
    sep: str | None = "\t",
    add_inverse: bool = False,
    name: str | None = None,
    encoding: str | None = None,
) -> Dataset:
    """Load a triple file: one ``head<sep>relation<sep>tail`` per line (TSV by default).

    Entity and relation names are mapped to ids in order of first appearance (entities: one
    node type ``"entity"``). Blank lines and lines starting with ``#`` are skipped.

    Args:
        path: the file.
        sep: field separator; ``None`` splits on any whitespace.
        add_inverse: add relation ``rev-<rel>`` with every edge reversed.
        name: dataset name (default: the path).
        encoding: the file's text encoding; None (default): the encoding a byte-order mark
            at the file's start names (UTF-8, UTF-16 or UTF-32), else UTF-8. A mark is never
            part of the first name; a file read as ``utf-16`` or ``utf-32`` (no byte order
            named) must start with one.

    Raises:
        DatasetError: if the file is missing or unreadable, empty, not text in ``encoding``
            (the message gives the line and byte), starts with a byte-order mark of another
            encoding than ``encoding``, or a line does not have three fields.
    """
    p = Path(path)
    if not p.is_file():
        raise DatasetError(f"triple file '{p}' does not exist")
    if sep is not None and (not isinstance(sep, str) or not sep):
        raise DatasetError(f"sep must be a non-empty string or None, got {sep!r}")
    entities: dict[str, int] = {}
    relations: dict[str, int] = {}
    heads: list[int] = []
    rels: list[int] = []
    tails: list[int] = []
    for lineno, line in _text_lines(p, text_encoding(p, encoding)):
        line = line.rstrip("\r\n")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = [x.strip() for x in (line.split(sep) if sep is not None else line.split())]
        if len(parts) != 3 or not all(parts):
            raise DatasetError(
                f"{p}:{lineno}: expected 3 fields (head, relation, tail), got {len(parts)}: "
                f"{line[:80]!r}"
            )
        h, r, t = parts
        heads.append(entities.setdefault(h, len(entities)))
        rels.append(relations.setdefault(r, len(relations)))
        tails.append(entities.setdefault(t, len(entities)))
    if not heads:
        raise DatasetError(f"triple file '{p}' has no triples")
    n = len(entities)
    src, dst, et = (torch.tensor(v, dtype=torch.int64) for v in (heads, tails, rels))
    edge_index = torch.stack([src, dst])
    edge_types = [("entity", r, "entity") for r in relations]
    if add_inverse:
        edge_index, et, edge_types = with_inverse_relations(edge_index, et, edge_types)
    return Dataset(
        name=name or str(p),
        num_nodes=n,
        node_type=torch.zeros(n, dtype=torch.int64),
        node_types=["entity"],
        edge_index=edge_index,
        edge_type=et,
        edge_types=edge_types,
        info={"source": str(p), "entity_names": list(entities)},
    )


#: Endpoint node types of the relations in ``ogbn_mag_0.1`` (a 10% ogbn-mag sample), derived
#: from the data: each file is the inverse of its partner; ``cited``/``citing`` ids span one id
#: space (papers, max id 73637); ``has`` row 0 uses ids 0..6000 with a few very high-degree
#: nodes (up to 4391 papers each) — fields of study — while its row 1 spans the paper ids with
#: at most 6 entries per paper; ``writing`` row 1 has papers with up to 247 entries (authors per
#: paper) and row 0 up to 81 (papers per author). Ids are local to each node type (author ids
#: and paper ids overlap numerically). There is no affiliation relation, so no institutions.
MAG_SAMPLE_RELATIONS: dict[str, tuple[str, str]] = {
    "cited": ("paper", "paper"),
    "citing": ("paper", "paper"),
    "has": ("field_of_study", "paper"),
    "is-about": ("paper", "field_of_study"),
    "writing": ("author", "paper"),
    "written-by": ("paper", "author"),
}
_MAG_SAMPLE_NODE_TYPES = ["paper", "author", "field_of_study"]


def dataset_file(root: Path, *parts: str) -> Path | None:
    """``root/parts...`` when it is a regular file inside ``root`` (links followed only where
    they stay inside ``root``), None when nothing is there; DatasetError naming it when it is
    something else (a folder, a FIFO) or leads out of ``root``."""
    f = root.joinpath(*parts)
    if not os.path.lexists(f):
        return None
    try:
        inside = f.resolve(strict=True).is_relative_to(root.resolve(strict=True))
    except (OSError, RuntimeError) as err:  # a dangling or looping link
        raise DatasetError(f"{f}: cannot be resolved ({err})") from None
    if not inside:
        raise DatasetError(f"{f}: a link leading out of the dataset folder {root}")
    if not f.is_file():
        raise DatasetError(f"{f}: not a regular file")
    return f


def _coo_files(directory: Path) -> dict[str, Path]:
    """``{relation: file}`` for the ``<rel>_coo*.npy`` files of a directory (sorted by name);
    DatasetError for one that is not a regular file or a link leading out of the directory."""
    files: dict[str, Path] = {}
    for f in sorted(directory.glob("*_coo*.npy")):
        dataset_file(directory, f.name)  # a regular file, no link leading out
        rel = f.name[: f.name.index("_coo")]
        if rel in files:
            raise DatasetError(f"relation {rel!r} has two files: {files[rel].name}, {f.name}")
        files[rel] = f
    return files


#: What np.load raises on a truncated or corrupt file (numpy parses the header with tokenize and
#: ast.literal_eval, and memory-maps the data).
_NPY_ERRORS = (OSError, ValueError, EOFError, SyntaxError, tokenize.TokenError, OverflowError)


def open_npy(f: Path) -> np.ndarray:
    """Memory-map one ``.npy`` file (nothing is read but its header); DatasetError naming the
    file when it is not one readable array."""
    try:
        a = np.load(f, mmap_mode="r", allow_pickle=False)
    except _NPY_ERRORS as err:
        raise DatasetError(f"{f}: not a readable .npy file ({type(err).__name__}: {err})") from None
    if not isinstance(a, np.ndarray):  # np.load opens an .npz archive whatever the name
        a.close()
        raise DatasetError(f"{f}: is an .npz archive, expected one .npy array")
    return a


#: Width of IGBH's feature rows: a headerless feature file is read as float32 rows this wide.
IGBH_FEATURE_WIDTH = 1024


def open_feature_table(f: Path, width: int = IGBH_FEATURE_WIDTH) -> np.ndarray:
    """Memory-map a feature table: an ``.npy`` file (:func:`open_npy`), a tensor file
    ``torch.save`` wrote (a zip archive: :func:`open_saved_table`), or a file without either
    magic as the raw row-major float32 ``[size / (4 * width), width]`` table that IGBH's
    ``large`` and ``full`` sizes ship as ``node_feat.npy``. DatasetError naming the file when
    it is none of these."""
    with open(f, "rb") as fh:
        magic = fh.read(6)
    if magic == b"\x93NUMPY":
        return open_npy(f)
    if magic.startswith(b"PK\x03\x04") or f.suffix == ".pt":
        return open_saved_table(f)
    size, row = f.stat().st_size, 4 * width
    if width <= 0 or size == 0 or size % row:
        raise DatasetError(
            f"{f}: not a .npy file, nor a headerless float32 table {width} wide (its {size} "
            f"bytes are not a positive multiple of {row})"
        )
    return np.memmap(f, dtype="<f4", mode="r", shape=(size // row, width))  # IGBH's order


#: The tensor types a saved feature table may hold, as NumPy types.
_SAVED_DTYPES = {torch.float32: np.float32, torch.float16: np.float16}
#: A zip local file header: signature, 22 bytes, name length, extra field length.
_LOCAL_HEADER = struct.Struct("<4s22xHH")
#: The byte order a ``torch.save`` archive's ``byteorder`` record names, as NumPy's mark.
_SAVED_BYTE_ORDERS: dict[bytes, Literal["<", ">"]] = {b"little": "<", b"big": ">"}


def saved_records(f: Path) -> tuple[zipfile.ZipInfo, Literal["<", ">"]]:
    """The one tensor record of the archive ``torch.save`` wrote to ``f`` and the byte order
    of its values (NumPy's ``<`` or ``>``).

    Every entry of such an archive lies under one top folder, the prefix (the file's stem when
    it was written: ``data.pt`` has ``data/``); a tensor's bytes are the record
    ``<prefix>/data/<key>``, and ``<prefix>/byteorder`` names their byte order (``little`` when
    absent, as ``torch.load`` reads it). DatasetError naming the file for anything else."""
    try:
        with zipfile.ZipFile(f) as z:
            infos = z.infolist()
            prefix = infos[0].filename.split("/", 1)[0] if infos else ""
            records: dict[str, list[zipfile.ZipInfo]] = {}
            for info in infos:
                top, _, name = info.filename.partition("/")
                if top == prefix and name:
                    records.setdefault(name, []).append(info)
            order = records.get("byteorder", [])
            marks = [z.read(info) if info.file_size <= 8 else b"" for info in order]
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, NotImplementedError) as err:
        raise DatasetError(f"{f}: not a readable tensor archive ({err})") from None
    storages = [
        info
        for name, found in records.items()
        if name.startswith("data/") and "/" not in name[5:] and name[5:]
        for info in found
    ]
    if len(storages) != 1:
        raise DatasetError(
            f"{f}: expected one tensor record {prefix}/data/<key> in the archive, found "
            f"{len(storages)}"
        )
    if len(marks) > 1 or (marks and marks[0] not in _SAVED_BYTE_ORDERS):
        raise DatasetError(f"{f}: the archive's byte-order record is not 'little' or 'big'")
    return storages[0], _SAVED_BYTE_ORDERS[marks[0] if marks else b"little"]


def open_saved_table(f: Path) -> np.ndarray:
    """Memory-map the one 2-D float32 or float16 row-major tensor ``torch.save`` wrote to ``f``
    (MLPerf's ``node_feat_fp16.pt``). The zip archive stores the tensor's bytes as one
    uncompressed record (:func:`saved_records`): the table is that record, from the tensor's
    storage offset, typed in the byte order the archive names (a big-endian file's table has a
    ``>`` dtype: NumPy reads its values right, and the feature stores swap the rows they
    gather). Its type and shape come from ``torch.load(..., weights_only=True, mmap=True)``,
    which runs no code from the file. DatasetError naming the file for anything else."""
    try:
        # A big-endian file's storage is swapped in the (private) mapping: torch reads it all.
        t = torch.load(f, map_location="cpu", mmap=True, weights_only=True)
    except Exception as err:  # torch raises RuntimeError, pickle's and zip's errors alike
        raise DatasetError(f"{f}: not a tensor file torch.save wrote ({err})") from None
    info, order = saved_records(f)
    if not (isinstance(t, torch.Tensor) and t.dim() == 2 and t.dtype in _SAVED_DTYPES) or (
        not t.is_contiguous()
    ):
        what = f"{t.dtype} {list(t.shape)}" if isinstance(t, torch.Tensor) else type(t).__name__
        raise DatasetError(f"{f}: expected one row-major 2-D float32 or float16 tensor, got {what}")
    try:
        with open(f, "rb") as fh:
            fh.seek(info.header_offset)
            magic, name, extra = _LOCAL_HEADER.unpack(fh.read(_LOCAL_HEADER.size))
    except (ValueError, OSError, struct.error) as err:
        raise DatasetError(f"{f}: no single tensor record in the archive ({err})") from None
    size = t.element_size()
    end = (t.storage_offset() + t.numel()) * size
    if magic != b"PK\x03\x04" or info.compress_type != zipfile.ZIP_STORED or end > info.file_size:
        raise DatasetError(f"{f}: the tensor's record is not its {end} bytes, stored uncompressed")
    start = info.header_offset + _LOCAL_HEADER.size + name + extra + t.storage_offset() * size
    if start + t.numel() * size > f.stat().st_size:
        raise DatasetError(f"{f}: the tensor runs past the end of the file")
    dtype = np.dtype(_SAVED_DTYPES[t.dtype]).newbyteorder(order)
    return np.memmap(f, dtype=dtype, mode="r", offset=start, shape=tuple(t.shape))


def _open_coo(f: Path) -> np.ndarray:
    """Memory-map one COO file, which must hold an integer array of shape (2, E)."""
    a = open_npy(f)
    if a.ndim != 2 or a.shape[0] != 2 or not is_integer_array(a):
        raise DatasetError(
            f"{f.name}: expected an integer array of shape (2, E), got {a.dtype} {a.shape}"
        )
    return a


def is_integer_array(a: np.ndarray) -> bool:
    """Whether ``a`` holds plain signed or unsigned integers, in either byte order (NumPy counts
    ``timedelta64`` as a signed integer type; it, booleans, dates and the rest are refused)."""
    return a.dtype.kind in "iu"


def _max_coo_id(f: Path, a: np.ndarray, row: int) -> int:
    """The largest id in row ``row`` of a COO array (-1 if empty), checked to be a node id
    Hector's int32 kernels can index; DatasetError on a negative id."""
    if a.shape[1] == 0:
        return -1
    ids = a[row]
    lo, hi = int(ids.min()), int(ids.max())
    if lo < 0:
        col = int(np.argmax(ids < 0))
        raise DatasetError(f"{f}: entry [{row}, {col}] = {int(ids[col])} < 0")
    if hi >= MAX_COUNT:
        col = int(np.argmax(ids == hi))
        raise DatasetLimitError(
            f"{f}: node id {hi} at [{row}, {col}] exceeds the int32 limit of Hector's kernels "
            f"(ids must be < {MAX_COUNT})"
        )
    return hi


def load_coo_dir(
    path: str | os.PathLike[str],
    *,
    relations: Mapping[str, tuple[str, str]] | None = None,
    num_nodes: Mapping[str, int] | None = None,
    node_types: Sequence[str] | None = None,
    name: str | None = None,
) -> Dataset:
    """Load a directory of NumPy COO arrays, one ``<rel>_coo*.npy`` (int [2, E]) per relation.

    Row 0 holds source ids and row 1 destination ids, local to their node type. The files are
    read in place (memory-mapped), never copied.

    Args:
        path: the directory.
        relations: ``{rel: (src_type, dst_type)}``; default: :data:`MAG_SAMPLE_RELATIONS` when
            the file set is exactly the ogbn-mag sample's, else one node type ``"node"``.
        num_nodes: nodes per type; default (and minimum): the largest id used + 1.
        node_types: node type order (default: order of first mention in ``relations``; for the
            ogbn-mag sample ``paper, author, field_of_study``).
        name: dataset name (default: the directory's name).

    Raises:
        DatasetError: on a missing directory, no ``*_coo*.npy`` files, an array that is not an
            integer [2, E] array, a negative id or an id ``>= num_nodes[type]``, or a relation
            missing from ``relations``.
    """
    d = Path(path)
    if not d.is_dir():
        raise DatasetError(f"COO directory '{d}' does not exist")
    files = _coo_files(d)
    if not files:
        raise DatasetError(f"'{d}' has no <relation>_coo*.npy files")
    relations, node_types, assumption = _coo_schema(files, relations, node_types)

    # Headers first (memory-mapped, nothing read): every size is checked before allocating.
    arrays = {rel: _open_coo(f) for rel, f in files.items()}
    num_edges = sum(int(a.shape[1]) for a in arrays.values())
    check_dataset_size(str(d), edges=num_edges, names=len(arrays) + len(node_types))
    counts = coo_node_counts(files, arrays, relations, node_types, num_nodes)
    check_dataset_size(str(d), nodes=sum(counts.values()), edges=num_edges)
    info = {
        "source": str(d),
        "files": {rel: f.name for rel, f in files.items()},
        "assumption": assumption,
        "num_nodes": "given" if num_nodes is not None else "largest id + 1 per node type",
    }
    return coo_dataset(name or d.name, arrays, relations, counts, info)


def coo_dataset(
    name: str,
    arrays: dict[str, np.ndarray],
    relations: Mapping[str, tuple[str, str]],
    counts: dict[str, int],
    info: dict,
    *,
    edge_types: list[tuple[str, str, str]] | None = None,
    add_inverse: bool = False,
) -> Dataset:
    """The dataset of per-relation ``[2, E]`` arrays of local ids, ``counts[t]`` nodes of
    each type in ``counts``' order: relations named by the arrays' keys (or ``edge_types``, in
    the arrays' order), and their inverses with ``add_inverse``."""
    node_types = list(counts)
    edge_index, edge_type, joined = join_coo(arrays, relations, node_types, counts)
    edge_types = edge_types or joined
    if add_inverse:
        edge_index, edge_type, edge_types = with_inverse_relations(
            edge_index, edge_type, edge_types
        )
    node_type = torch.repeat_interleave(
        torch.arange(len(node_types)), torch.tensor([counts[t] for t in node_types])
    )
    n = int(node_type.shape[0])
    return Dataset(name, n, node_type, node_types, edge_index, edge_type, edge_types, info)


def _coo_schema(
    files: dict[str, Path],
    relations: Mapping[str, tuple[str, str]] | None,
    node_types: Sequence[str] | None,
) -> tuple[Mapping[str, tuple[str, str]], list[str], str | None]:
    """The relations' endpoint types and the node type order for a COO directory's files,
    and the assumption made when ``relations`` is not given; DatasetError on a mismatch."""
    assumption = None
    if relations is None:
        if set(files) == set(MAG_SAMPLE_RELATIONS):
            relations = MAG_SAMPLE_RELATIONS
            node_types = node_types or _MAG_SAMPLE_NODE_TYPES
            assumption = "ogbn-mag sample schema (hector.datasets.MAG_SAMPLE_RELATIONS)"
        else:
            relations = {rel: ("node", "node") for rel in files}
            assumption = "one node type; ids shared by all relations"
    for rel in files:
        if rel not in relations:
            raise DatasetError(f"relation {rel!r} ({files[rel].name}) is not in relations")
    if node_types is None:
        node_types = list(dict.fromkeys(t for rel in files for t in relations[rel]))
    node_types = list(node_types)
    for rel in files:
        for t in relations[rel]:
            if t not in node_types:
                raise DatasetError(f"relation {rel!r} uses node type {t!r} not in node_types")
    return relations, node_types, assumption


def coo_node_counts(
    files: dict[str, Path],
    arrays: dict[str, np.ndarray],
    relations: Mapping[str, tuple[str, str]],
    node_types: list[str],
    num_nodes: Mapping[str, int] | None,
) -> dict[str, int]:
    """Nodes per type: the largest id the files use + 1, or the count given (no smaller)."""
    max_id = dict.fromkeys(node_types, -1)
    for rel, a in arrays.items():
        for row, t in enumerate(relations[rel]):
            max_id[t] = max(max_id[t], _max_coo_id(files[rel], a, row))
    counts = {t: max_id[t] + 1 for t in node_types}
    if num_nodes is not None:
        for t, c in num_nodes.items():
            if t not in counts:
                raise DatasetError(f"num_nodes names unknown node type {t!r}")
            c = dataset_count(f"num_nodes[{t!r}]", c)
            if c < counts[t]:
                raise DatasetError(
                    f"num_nodes[{t!r}] = {c} but the files use id {counts[t] - 1} for that type"
                )
            counts[t] = c
    return counts


def join_coo(
    arrays: dict[str, np.ndarray],
    relations: Mapping[str, tuple[str, str]],
    node_types: list[str],
    counts: dict[str, int],
) -> tuple[torch.Tensor, torch.Tensor, list[tuple[str, str, str]]]:
    """The relations' arrays as one graph: global int64 ``edge_index`` (ids shifted by their
    node type's offset), ``edge_type`` and the edge types, in file order."""
    starts = np.cumsum([0] + [counts[t] for t in node_types]).tolist()
    offsets = dict(zip(node_types, starts[:-1], strict=True))
    eis, ets, edge_types = [], [], []
    for r, (rel, a) in enumerate(arrays.items()):
        s, t = relations[rel]
        shift = np.array([[offsets[s]], [offsets[t]]], dtype=np.int64)
        # ids shifted to global ones in a new int64 array (the memory map stays read-only)
        eis.append(torch.from_numpy(np.asarray(a, dtype=np.int64) + shift))
        ets.append(torch.full((a.shape[1],), r, dtype=torch.int64))
        edge_types.append((s, rel, t))
    return torch.cat(eis, 1), torch.cat(ets), edge_types
