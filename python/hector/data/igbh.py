"""IGBH's files as a Hector dataset: :func:`load_igbh`.

The Illinois Graph Benchmark's heterogeneous graphs (IGBH, the graph of MLPerf Training's
R-GAT) ship one folder per size (``tiny``, ``small``, ``medium``, ...) laid out as::

    <size>/processed/
        paper/node_feat.npy                       [N_paper, 1024] float32 (or float16)
        paper/node_label_19.npy                   [N_paper] labels, 19 classes
        paper/node_label_2K.npy                   [N_paper] labels, 2983 classes
        author/node_feat.npy                      one folder per node type
        paper__cites__paper/edge_index.npy        integer [E, 2]: column 0 source ids,
        paper__written_by__author/edge_index.npy  column 1 destination ids, both local to
        ...                                       their node type

Every ``<src>__<rel>__<dst>`` folder is a relation. Its names must be plain file names
(:func:`check_name`: no slash, backslash or NUL, no leading ``.`` — so no ``..`` —, printable, at
most 255 bytes), since node type names become folder names; a file the loaders read may be a link
only where it stays inside the dataset folder (:func:`dataset_file`). A node type's count is its
feature file's row count (read from the header, nothing else), or its largest id + 1 where it has
no features. The ``large`` and ``full`` sizes ship ``node_feat.npy`` without a header: raw
row-major float32 rows, 1024 wide, counted from the file's size. MLPerf's R-GAT reference adds a
float16 copy of the largest types' features, ``node_feat_fp16.pt`` (:data:`MLPERF_FEATURE_FILE`,
written by ``torch.save``), which the feature stores memory-map in place as well.
The edge files are memory-mapped and read once to join them; the feature files are left to
:func:`hector.data.typed_features.igbh_features`, which gathers their rows per batch.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .dataset import (
    Dataset,
    DatasetError,
    EdgeType,
    check_dataset_size,
)
from .files import (
    coo_dataset,
    coo_node_counts,
    dataset_file,
    is_integer_array,
    open_feature_table,
    open_npy,
)

__all__ = [
    "EDGE_FILE",
    "FEATURE_FILE",
    "LABEL_FILES",
    "MLPERF_FEATURE_FILE",
    "check_name",
    "dataset_file",
    "igbh_root",
    "load_igbh",
]

#: The edge list of each relation folder.
EDGE_FILE = "edge_index.npy"
#: The feature table of each node type folder.
FEATURE_FILE = "node_feat.npy"
#: The float16 copy MLPerf's R-GAT reference saves next to it (``torch.save``).
MLPERF_FEATURE_FILE = "node_feat_fp16.pt"
#: The label file of each number of classes IGBH publishes.
LABEL_FILES = {19: "node_label_19.npy", 2983: "node_label_2K.npy"}


def check_name(name: str, what: str, where: object) -> str:
    """``name`` when it is a plain file name: not empty, printable, at most 255 bytes, without
    slash, backslash or NUL and not starting with ``.`` (so neither ``.`` nor ``..``); else
    DatasetError naming ``where``. Node type names become folder names: ``paper`` is read
    from ``<root>/paper/``."""
    ok = (
        isinstance(name, str)
        and name.isprintable()
        and not name.startswith(".")
        and not any(c in name for c in "/\\\0")
        and 0 < len(name.encode("utf-8", "surrogateescape")) <= 255
    )
    if not ok:
        raise DatasetError(
            f"{where}: {what} {name!r} is not a plain file name (printable, no '/', '\\' or "
            "NUL, no leading '.', at most 255 bytes)"
        )
    return name


def relation_folders(root: Path) -> dict[str, Path]:
    """``{folder name: edge file}`` for the ``<src>__<rel>__<dst>`` folders of ``root``;
    DatasetError for one whose names are not plain names (:func:`check_name`)."""
    folders = {}
    for entry in sorted(root.iterdir()):
        edge_type = _edge_type(entry.name)
        if edge_type is not None and entry.is_dir():
            for what, name in zip(("node type", "relation", "node type"), edge_type, strict=True):
                check_name(name, what, f"{root}: relation folder {entry.name!r}")
            folders[entry.name] = entry / EDGE_FILE
    return folders


def _edge_type(folder: str) -> EdgeType | None:
    """``(src, rel, dst)`` of a ``<src>__<rel>__<dst>`` folder name, else None."""
    parts = folder.split("__")
    return (parts[0], parts[1], parts[2]) if len(parts) == 3 and all(parts) else None


def igbh_root(path: str | os.PathLike[str]) -> Path | None:
    """The folder holding the relation folders: ``path`` itself or its ``processed``
    subfolder; None when neither has a ``<src>__<rel>__<dst>`` folder."""
    base = Path(path)
    for candidate in (base, base / "processed"):
        if candidate.is_dir() and relation_folders(candidate):
            return candidate
    return None


def _open_edges(root: Path, f: Path) -> np.ndarray:
    """One relation's edges as a ``[2, E]`` view of its ``[E, 2]`` integer file."""
    if dataset_file(root, f.parent.name, f.name) is None:
        raise DatasetError(f"{f}: missing (every <src>__<rel>__<dst> folder needs {EDGE_FILE})")
    a = open_npy(f)
    if a.ndim != 2 or a.shape[1] != 2 or not is_integer_array(a):
        hint = " (IGBH stores [E, 2]; this looks like [2, E])" if a.shape[:1] == (2,) else ""
        raise DatasetError(
            f"{f}: expected an integer array of shape (E, 2), got {a.dtype} {a.shape}{hint}"
        )
    return a.T


def _feature_rows(root: Path, node_types: Sequence[str]) -> dict[str, int]:
    """Rows of each node type's feature file, read from its header (types without one are
    left out)."""
    rows = {}
    for t in node_types:
        f = dataset_file(root, t, FEATURE_FILE) or dataset_file(root, t, MLPERF_FEATURE_FILE)
        if f is not None:
            table = open_feature_table(f)
            if table.ndim != 2:
                raise DatasetError(f"{f}: expected a 2-D feature table, got shape {table.shape}")
            rows[t] = int(table.shape[0])
    return rows


def load_igbh(
    path: str | os.PathLike[str],
    *,
    add_inverse: bool = True,
    node_types: Sequence[str] | None = None,
    name: str | None = None,
) -> Dataset:
    """Load an IGBH folder (the layout in this module's docstring) as a :class:`Dataset`.

    Args:
        path: the size's folder or its ``processed`` subfolder.
        add_inverse: add relation ``rev-<rel>`` with every edge reversed (as MLPerf's R-GAT
            and Hector's ``synthetic:igbh-*`` replicas do), so every node type receives edges.
        node_types: node type order (default: order of first mention in the relation folders'
            sorted names).
        name: dataset name (default: ``igbh:<folder>``).

    Raises:
        DatasetError: no relation folder, a missing or malformed edge file (not plain
            integers, in either byte order), a negative id, an id beyond its type's feature
            rows, a feature file that is not a 2-D table, a name that is not a plain file name,
            or a file that is a link leading out of the folder.
        DatasetLimitError: ids or sizes over Hector's limits, before the edges are joined.
    """
    root = igbh_root(path)
    if root is None:
        raise DatasetError(
            f"{path}: no <src>__<rel>__<dst> relation folders here or under processed/ "
            "(the IGBH layout: see hector.data.igbh)"
        )
    folders = relation_folders(root)
    edge_types = [_edge_type(rel) or ("", rel, "") for rel in folders]
    relations = {rel: (s, d) for rel, (s, _, d) in zip(folders, edge_types, strict=True)}
    types = list(node_types or dict.fromkeys(t for s, d in relations.values() for t in (s, d)))
    for t in types:
        check_name(t, "node type", root)
    for rel, ends in relations.items():
        for t in ends:
            if t not in types:
                raise DatasetError(f"relation folder {rel} uses node type {t!r}, not in node_types")
    arrays = {rel: _open_edges(root, f) for rel, f in folders.items()}
    edges = sum(int(a.shape[1]) for a in arrays.values()) * (2 if add_inverse else 1)
    check_dataset_size(str(root), edges=edges, names=2 * len(arrays) + len(types))
    try:
        counts = coo_node_counts(folders, arrays, relations, types, _feature_rows(root, types))
    except DatasetError as err:
        raise DatasetError(
            f"{err} (a node type's count is the rows of its {FEATURE_FILE})"
        ) from None
    check_dataset_size(str(root), nodes=sum(counts.values()), edges=edges)
    return coo_dataset(
        name or f"igbh:{root.parent.name if root.name == 'processed' else root.name}",
        arrays,
        relations,
        counts,
        {"source": str(root), "layout": "igbh", "inverse_edges": add_inverse},
        edge_types=edge_types,
        add_inverse=add_inverse,
    )
