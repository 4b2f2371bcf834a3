"""The oracle of the ``loaders`` strategy: write a recipe's files, run the loader on them and
judge the result.

A case ends as ``(0, ...)`` when the loader accepted the files and handed on exactly what NumPy
or PyTorch read from the same files (or what the recipe wrote), ``(1, ...)`` when it refused them
with its documented error (:class:`ValueError`, of which :class:`~hector.data.dataset.DatasetError`
is one), and ``(2, "internal error: ...")`` — a finding — for any other exception, for values
that differ from the reference, for a file refused where the reference reads a valid one, or
for a file read from outside the dataset folder. Crashes and hangs are caught by the runner.
"""

from __future__ import annotations

import codecs
import re
import shutil
import tempfile
import traceback
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from hector_fuzz.loader_files import (
    DECOY_ROWS,
    igbh_folder,
    label_values,
    npy_bytes,
    plain_name,
    torch_file,
    tsv_bytes,
)

__all__ = ["Finding", "judge"]

Recipe = dict[str, Any]


class Finding(Exception):
    """A silent wrong result or a false refusal (the message says which)."""


def judge(recipe: Recipe, workdir: str) -> tuple[int, str]:
    """(status, message) of one recipe run in a fresh folder under ``workdir``."""
    check = _CHECKS[recipe["grammar"]]
    tmp = Path(tempfile.mkdtemp(prefix="case-", dir=workdir))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            message = check(recipe, tmp)
        return (0, "accepted") if message is None else (1, message)
    except Finding as finding:
        return 2, f"internal error: {finding}"
    except Exception:  # noqa: BLE001 - anything but the documented error is a finding
        return 2, "internal error: " + traceback.format_exc()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _refused(err: ValueError, valid: bool) -> str:
    """The message of a clean refusal; a Finding when the reference reads the file as valid."""
    if valid:
        raise Finding(f"false refusal of a valid file: {err}")
    return f"refused: {err}"


def _same(got: torch.Tensor | np.ndarray, want: Any, what: str) -> None:
    """Byte-exact equality in this machine's byte order (NaN payloads included)."""
    g = np.asarray(got.numpy() if isinstance(got, torch.Tensor) else got)
    w = np.asarray(want.numpy() if isinstance(want, torch.Tensor) else want)
    w = w.astype(w.dtype.newbyteorder("="))
    same = g.shape == w.shape and g.dtype == w.dtype
    if not same or g.tobytes() != np.ascontiguousarray(w).tobytes():
        raise Finding(f"silent wrong {what}: {g.dtype} {g.shape}, reference {w.dtype} {w.shape}")


# ---- npy -----------------------------------------------------------------------------------


def _reference_npy(path: Path) -> np.ndarray | None:
    try:
        a = np.load(path, allow_pickle=False)
        if isinstance(a, np.ndarray) and a.size == 0:  # NumPy drops a subarray dtype's dims
            m = np.load(path, mmap_mode="r", allow_pickle=False)
            a = np.empty(m.shape, m.dtype)
    except Exception:  # noqa: BLE001 - the reference refuses: no oracle
        return None
    return a if isinstance(a, np.ndarray) else None


def _check_npy(r: Recipe, tmp: Path) -> str | None:
    data = npy_bytes(r)
    if r["role"] == "edges":
        (tmp / "coo").mkdir()
        path = tmp / "coo" / "cites_coo.npy"
        path.write_bytes(data)
        return _check_edges(path, _reference_npy(path))
    path = tmp / "a.npy"
    path.write_bytes(data)
    ref = _reference_npy(path)
    if r["role"] == "labels":
        rows = len(ref) if ref is not None and ref.ndim else 0
        np.save(tmp / "x.npy", np.zeros((rows, 2), np.float32))
        ids = list(range(len(ref))) if ref is not None and ref.ndim == 1 else [0]
        return _check_label_store("feature", tmp / "x.npy", path, ref, r["classes"], ids)
    return _check_features(path, ref, r["read"])


def _check_features(path: Path, ref: np.ndarray | None, read: str) -> str | None:
    from hector.data.loader import FeatureStore

    valid = (
        ref is not None
        and ref.ndim == 2
        and ref.dtype.newbyteorder("=") in (np.float32, np.float16)
        and ref.flags.c_contiguous
        and ref.dtype.itemsize * ref.shape[1] % 4 == 0
    )
    try:
        store = FeatureStore(path, read=read)
        rows = store.gather(np.arange(store.num_rows))
        store.close()
    except ValueError as err:
        return _refused(err, valid)
    if ref is None:
        raise Finding("accepted a feature file numpy cannot read")
    _same(rows, ref, "features")
    return None


def _check_edges(path: Path, ref: np.ndarray | None) -> str | None:
    from hector import datasets

    valid = ref is not None and ref.dtype.kind in "iu" and ref.ndim == 2 and ref.shape[0] == 2
    if valid and ref is not None and ref.size:
        valid = int(ref.min()) >= 0 and int(ref.max()) < 2**31 - 1
    try:
        ds = datasets.load_coo_dir(path.parent)
    except ValueError as err:
        return _refused(err, valid)
    if not valid or ref is None:
        raise Finding(f"accepted an edge file that is not integer (2, E) ids: {ref!r:.200}")
    _same(ds.edge_index, ref.astype(np.int64), "edge ids")
    return None


# ---- labels --------------------------------------------------------------------------------


def _expected_labels(
    ref: np.ndarray | None, classes: int | None, ids: list[int], store: str
) -> np.ndarray | None:
    """The labels a store must hand on for ``ids``, or None when it must refuse."""
    kinds = "iu" if store == "unified" else "iuf"
    if ref is None or ref.ndim != 1 or ref.dtype.kind not in kinds:
        return None
    if any(not 0 <= i < len(ref) for i in ids):
        return None
    if store == "unified" and ref.dtype.kind == "u" and len(ref) and int(ref.max()) >= 2**63:
        return None  # copied whole into int64 when the store is made: refused there
    values = ref[ids]
    top = classes if classes is not None else 2**63
    with np.errstate(invalid="ignore"):
        if values.dtype.kind == "f":
            ok = np.isfinite(values) & (values == np.floor(values)) & (values >= 0)
            ok &= values < float(top)
        else:
            ok = (values >= 0) & (values <= top - 1)
    return values.astype(np.int64) if ok.all() else None


def _check_label_store(
    store: str, feats: Path, labels: Path, ref: np.ndarray | None, classes: Any, ids: list[int]
) -> str | None:
    from hector.data.loader import FeatureStore, UnifiedFeatureStore

    expected = _expected_labels(ref, classes, ids, store)
    try:
        if store == "unified":
            s: Any = UnifiedFeatureStore(feats, labels, classes=classes, allow_host_fallback=True)
        else:
            s = FeatureStore(feats, labels, classes=classes)
        got = s.gather_labels(np.array(ids, dtype=np.int64))
        s.close()
    except ValueError as err:
        return _refused(err, expected is not None)
    if expected is None:
        raise Finding(f"handed on labels that are not class ids below {classes}: {got[:8]}")
    _same(got.cpu(), expected, "labels")
    return None


def _check_labels(r: Recipe, tmp: Path) -> str | None:
    values = label_values(r["values"], r["dtype"])
    rows = len(values)
    if r["store"] == "igbh":
        return _check_igbh_labels(r, tmp, values)
    np.save(tmp / "x.npy", np.ones((rows, 2), np.float32))
    np.save(tmp / "y.npy", values)
    ref = _reference_npy(tmp / "y.npy")
    return _check_label_store(r["store"], tmp / "x.npy", tmp / "y.npy", ref, r["classes"], r["ids"])


def _check_igbh_labels(r: Recipe, tmp: Path, values: np.ndarray) -> str | None:
    from hector import datasets
    from hector.data.typed_features import igbh_features

    classes = r["classes"] if r["classes"] in (19, 2983) else 19
    root = tmp / "igbh" / "processed"
    (root / "paper").mkdir(parents=True)
    (root / "paper__cites__paper").mkdir()
    np.save(root / "paper__cites__paper" / "edge_index.npy", np.zeros((1, 2), np.int64))
    np.save(root / "paper" / "node_feat.npy", np.ones((len(values), 2), np.float32))
    name = {19: "node_label_19.npy", 2983: "node_label_2K.npy"}[classes]
    np.save(root / "paper" / name, values)
    expected = _expected_labels(_reference_npy(root / "paper" / name), classes, r["ids"], "igbh")
    try:
        store = igbh_features(datasets.load_igbh(root), classes=classes)
        got = store.gather_labels(np.array(r["ids"], dtype=np.int64))
        store.close()
    except ValueError as err:
        return _refused(err, expected is not None)
    if expected is None:
        raise Finding(f"handed on IGBH labels that are not class ids below {classes}")
    _same(got, expected, "labels")
    return None


# ---- torch.save ----------------------------------------------------------------------------


def _check_torch(r: Recipe, tmp: Path) -> str | None:
    from hector.data.loader import FeatureStore

    path = tmp / r["name"]
    table = torch_file(r, path)
    try:
        store = FeatureStore(path, read=r["read"])
        rows = store.gather(np.arange(store.num_rows))
        store.close()
    except ValueError as err:
        return _refused(err, table is not None)
    try:
        ref = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001
        raise Finding(f"accepted a file torch.load refuses ({err})") from None
    if not isinstance(ref, torch.Tensor):
        raise Finding(f"accepted a file holding {type(ref).__name__}")
    _same(rows, ref, "saved features")
    if table is not None:
        _same(rows, table, "saved features (the table written)")
    return None


# ---- TSV -----------------------------------------------------------------------------------

_MARKS = [
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
]


def _reference_triples(data: bytes, given: str | None, sep: str | None) -> Any:
    """(entity names, relation names, [head, rel, tail] ids) as the format defines them, or
    None where the file must be refused."""
    mark = next((fam for bom, fam in _MARKS if data.startswith(bom)), None)
    try:
        name = codecs.lookup(given).name if given is not None else None
    except LookupError:
        return None
    family = None if name is None else re.sub(r"^(utf-(8|16|32)).*$", r"\1", name)
    if given is not None and mark is not None and family != mark:
        return None
    if name in ("utf-16", "utf-32") and mark is None:  # no byte order named, none marked
        return None
    codec = given or {"utf-8": "utf-8-sig", None: "utf-8"}.get(mark) or str(mark)
    try:
        text = data.decode(codec).removeprefix("\ufeff")
    except UnicodeError:
        return None
    entities: dict[str, int] = {}
    relations: dict[str, int] = {}
    triples = []
    for line in re.split("\r\n|\r|\n", text):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = [x.strip() for x in (line.split(sep) if sep is not None else line.split())]
        if len(parts) != 3 or not all(parts):
            return None
        h, rel, t = parts
        triples.append(
            [entities.setdefault(h, len(entities)), relations.setdefault(rel, len(relations))]
            + [entities.setdefault(t, len(entities))]
        )
    return (list(entities), list(relations), triples) if triples else None


def _check_tsv(r: Recipe, tmp: Path) -> str | None:
    from hector import datasets

    data = tsv_bytes(r)
    path = tmp / "t.tsv"
    path.write_bytes(data)
    ref = _reference_triples(data, r["given"], r["sep"])
    try:
        ds = datasets.load_triples(path, sep=r["sep"], encoding=r["given"])
    except ValueError as err:
        return _refused(err, ref is not None)
    if ref is None:
        raise Finding("accepted a triple file the format refuses")
    entities, relations, triples = ref
    got = torch.stack([ds.edge_index[0], ds.edge_type, ds.edge_index[1]], 1).tolist()
    rels = [rel for _, rel, _ in ds.edge_types]
    if ds.info["entity_names"] != entities or rels != relations or got != triples:
        raise Finding(f"silent wrong triples: {ds.info['entity_names'][:4]} vs {entities[:4]}")
    return None


# ---- IGBH ----------------------------------------------------------------------------------


def _igbh_valid(r: Recipe) -> bool:
    """Whether the recipe's folder is one the loader must accept."""
    names = [n for s, rel, d, _ in r["relations"] for n in (s, rel, d)]
    return (
        all(plain_name(n) and "__" not in n for n in names)
        and r["node_types"] is None
        and set(r["links"]) <= {"feature_in"}
        and r["edge_dtype"] in ("<i8", ">i8", "<i4", "<u8")
        and not r["edge_specials"]
    )


def _check_igbh(r: Recipe, tmp: Path) -> str | None:
    from hector import datasets

    written = igbh_folder(r, tmp)
    try:
        ds = datasets.load_igbh(written["root"], node_types=r["node_types"], add_inverse=False)
    except ValueError as err:
        return _refused(err, _igbh_valid(r))
    for t in ds.node_types:
        if not plain_name(t):
            raise Finding(f"accepted node type {t!r}, not a plain file name")
    counts = ds.num_nodes_dict()
    if DECOY_ROWS in counts.values() or any(c > DECOY_ROWS for c in counts.values()):
        raise Finding(f"read a file outside the dataset folder: node counts {counts}")
    for name, edges in written["edges"].items():
        if name.count("__") == 2 and ds.edge_types:
            _check_relation(ds, name, edges)
    return _check_igbh_features(r, ds, written)


def _check_relation(ds: Any, folder: str, edges: np.ndarray) -> None:
    s, rel, d = folder.split("__")
    if (s, rel, d) not in ds.edge_types:
        raise Finding(f"relation folder {folder} is missing from the dataset")
    at = ds.edge_types.index((s, rel, d))
    counts = ds.num_nodes_dict()
    starts = np.cumsum([0] + [counts[t] for t in ds.node_types])
    first = dict(zip(ds.node_types, starts.tolist(), strict=False))
    got = ds.edge_index[:, ds.edge_type == at].numpy().T - np.array([first[s], first[d]])
    _same(got, edges.astype(np.int64), f"edges of {folder}")


def _check_igbh_features(r: Recipe, ds: Any, written: dict[str, Any]) -> str | None:
    from hector.data.typed_features import igbh_features

    names = ("node_feat_fp16.pt", "node_feat.npy")
    try:
        store = igbh_features(ds, classes=r["classes"], feature_file=names)
        rows = store.gather(np.arange(ds.num_nodes))
    except ValueError as err:
        return f"refused: {err}"
    tables = [written["features"].get(t) for t in ds.node_types]
    if any(t is None for t in tables):
        raise Finding("features gathered for a node type without a feature file inside")
    _same(rows, np.concatenate(tables), "IGBH features")
    store.close()
    return None


_CHECKS: dict[str, Callable[[Recipe, Path], str | None]] = {
    "npy": _check_npy,
    "torch": _check_torch,
    "tsv": _check_tsv,
    "igbh": _check_igbh,
    "labels": _check_labels,
}
