"""Graph datasets for Hector: loaders for data users have on disk and generated replicas.

Every loader returns a :class:`Dataset`: a heterogeneous graph whose node ids are *grouped by
node type* (all nodes of ``node_types[0]`` first, then ``node_types[1]``, ...), whose edges
carry a relation id, and whose relations each connect one fixed source node type to one fixed
destination node type (``edge_types[r] = (src_type, rel, dst_type)``). From it come the graph
Hector compiles against (:meth:`Dataset.hetero_graph`) and the inputs PyG layers take
(:meth:`Dataset.pyg_homogeneous` for ``RGCNConv``/``RGATConv``, :meth:`Dataset.pyg_hetero` for
``HGTConv``), so every system in a benchmark sees the same graph.

Sources (all through :func:`load` or the ``from_*``/``load_*`` functions):

* PyG ``HeteroData`` or ``edge_index`` + ``edge_type`` tensors: :func:`from_pyg`,
  :func:`from_edge_index`;
* triple files (``head<TAB>relation<TAB>tail``, names mapped to ids): :func:`load_triples`;
* a directory of NumPy COO arrays, one ``<rel>_coo*.npy`` file (int [2, E]) per relation:
  :func:`load_coo_dir`; the 10% ogbn-mag sample in ``../shared/data/ogbn_mag_0.1`` loads as
  ``load("ogbn_mag_0.1")`` straight from the shared folder (never copied);
* IGBH's folders (``<size>/processed/<src>__<rel>__<dst>/edge_index.npy``, per-type
  ``node_feat.npy``): :func:`load_igbh`, with :func:`hector.data.typed_features.igbh_features` for
  their features and labels;
* generated replicas of published graphs, ``load("synthetic:<name>", scale=, seed=)``, see
  :data:`SYNTHETIC_SPECS`. They match the published node / edge / relation counts (scaled) but
  not the real structure, hence the ``synthetic:`` prefix that the dataset name always keeps.

Bad input raises :class:`DatasetError` (a ``ValueError``) naming the file, line or entry; an
input whose ids or sizes exceed the int32 indexing of Hector's kernels, or whose arrays would not
fit in memory (:func:`hector.data.limits.memory_limit`), raises :class:`DatasetLimitError` before
anything of that size is allocated.
"""

from __future__ import annotations

import os
from pathlib import Path

from .data.dataset import Dataset, DatasetError, DatasetLimitError
from .data.dataset import EdgeType as EdgeType  # re-exported: loaders' (src, rel, dst) triples
from .data.files import MAG_SAMPLE_RELATIONS, load_coo_dir, load_triples
from .data.igbh import igbh_root, load_igbh
from .data.published import SYNTHETIC_SPECS, SyntheticSpec
from .data.synthetic import synthetic
from .data.tensors import from_edge_index, from_pyg

__all__ = [
    "MAG_SAMPLE_RELATIONS",
    "SYNTHETIC_SPECS",
    "Dataset",
    "DatasetError",
    "DatasetLimitError",
    "SyntheticSpec",
    "available",
    "data_root",
    "from_edge_index",
    "from_pyg",
    "load",
    "load_coo_dir",
    "load_igbh",
    "load_triples",
    "synthetic",
]


#: Real datasets found under the shared data folder by name.
SHARED_DATASETS = ("ogbn_mag_0.1",)


def data_root() -> Path | None:
    """The shared data folder: ``$HECTOR_DATA_DIR``, else ``../shared/data`` next to the repo.

    Returns ``None`` when none exists.
    """
    env = os.environ.get("HECTOR_DATA_DIR")
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parents[2]
    for cand in (repo.parent / "shared" / "data", repo / "shared" / "data"):
        if cand.is_dir():
            return cand
    return None


def available() -> list[str]:
    """Names :func:`load` accepts (besides paths)."""
    return [*SHARED_DATASETS, *(f"synthetic:{k}" for k in SYNTHETIC_SPECS)]


def load(name: str | os.PathLike[str], *, scale: float = 1.0, seed: int = 0) -> Dataset:
    """Load a dataset by name or path.

    Args:
        name: ``"synthetic:<graph>"`` (generated, see :func:`synthetic`), ``"ogbn_mag_0.1"``
            (read from the shared data folder, see :func:`data_root`), an IGBH folder
            (:func:`load_igbh`), a directory of ``<rel>_coo*.npy`` files
            (:func:`load_coo_dir`) or a triple file
            (:func:`load_triples`, ``.tsv``/``.txt``/``.csv``-less text with three fields).
        scale: size factor, for synthetic graphs only.
        seed: random seed, for synthetic graphs only.

    Raises:
        DatasetError: on an unknown name (the message lists the valid ones) or bad files.
    """
    s = os.fspath(name)
    if s.startswith("synthetic:"):
        return synthetic(s, scale=scale, seed=seed)
    if s in SHARED_DATASETS:
        root = data_root()
        where = root / s if root is not None else None
        if where is None or not where.is_dir():
            raise DatasetError(
                f"dataset {s!r} not found (looked in {where or '../shared/data'}); set "
                "HECTOR_DATA_DIR to the folder that holds it"
            )
        return load_coo_dir(where, name=s)
    p = Path(s)
    if p.is_dir():
        return load_igbh(p) if igbh_root(p) is not None else load_coo_dir(p)
    if p.is_file():
        return load_triples(p)
    raise DatasetError(
        f"unknown dataset {s!r}: not a file or directory; valid names: {', '.join(available())}"
    )
