"""Check prebuilt bundles on a GPU against PyG: ``python3 -m hector_bench.bundle_check``.

``--bundles DIR`` holds bundles built by :func:`build_check_bundles` (below) and their
manifest ``check.json`` (model, dataset, scale, seed, widths, heads of each). For each case this
loads the dataset's graph (``hector.datasets``, generated replicas: no files needed), builds the
PyG layer (``RGCNConv``, ``RGATConv``, ``HGTConv``) on CUDA with a fixed seed, and runs forward
and backward through the PyG layer and through the bundle with *the same weights* (the bundle's
arguments are derived from the PyG layer's parameters by the weight-sized glue of
``hector.models``, repeated here because that module needs the compiler), then compares the
outputs and every gradient and times a training step of each (median of ``--runs``).

Prints one line per case and writes the records to ``--out`` (JSON); exits 1 when a case fails
its tolerance or errors, 2 when there is nothing to check. Needs PyTorch with CUDA, PyG and
``cuda-bindings``; imports neither MLIR nor torch-mlir.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import torch

from hector.runtime import bundle as rb

#: The manifest of a directory of check bundles.
CHECK_FILE = "check.json"
#: Largest relative error (max |a - b| / max(1, max |b|)) a case may show.
TOLERANCE = 1e-3


# ---------------------------------------------------------------------------------------------
# The bundle's arguments from a PyG layer's parameters (hector.models' glue)
# ---------------------------------------------------------------------------------------------


def rgcn_args(conv: Any, x: torch.Tensor) -> list[torch.Tensor]:
    """``RGCNConv`` → ``(x, weight [R, in, out], root [in, out], bias [out])``."""
    return [x, conv.weight, conv.root, conv.bias]


def rgat_args(conv: Any, x: torch.Tensor) -> list[torch.Tensor]:
    """``RGATConv`` → ``(x, weight [R, in, H*F], q [H*F, H], k [H*F, H], bias [H*F])``."""
    return [x, conv.weight, conv.q, conv.k, conv.bias]


def hgt_args(conv: Any, x_dict: dict[str, torch.Tensor]) -> list[torch.Tensor]:
    """``HGTConv`` → the 11 (13 with the gated skip) arguments of ``hector.models``' HGT core,
    differentiable in the PyG layer's parameters."""
    from hector.models import HgtWeights, hgt_core_args

    xs = [x_dict[t] for t in conv.node_types]
    counts = [x.shape[0] for x in xs]
    return hgt_core_args(HgtWeights.of_pyg(conv), conv.heads, torch.cat(xs), counts)


def hgt_outputs(conv: Any, out: torch.Tensor, x_dict: dict[str, torch.Tensor]) -> dict:
    """The bundle's ``[N, out]`` rows split back into the destination node types."""
    types = list(conv.node_types)
    parts = dict(zip(types, out.split([x_dict[t].shape[0] for t in types]), strict=True))
    dst = {e[2] for e in conv.edge_types}
    return {t: parts[t] for t in types if t in dst}


# ---------------------------------------------------------------------------------------------
# The manifest
# ---------------------------------------------------------------------------------------------

#: The models a case may name.
MODELS = ("rgcn", "rgat", "hgt")


def bundle_path(root: str, name: Any) -> str:
    """The directory of bundle ``name`` under ``root``: a relative path without ``..`` that
    stays inside ``root`` once symbolic links are resolved; anything else is a ``ValueError``."""
    if not isinstance(name, str) or not name or "\0" in name:
        raise ValueError(f"bundle {name!r} is not a directory name")
    parts = name.replace("\\", "/").split("/")
    if os.path.isabs(name) or ".." in parts:
        raise ValueError(f"bundle {name!r} must be a path inside {root} (no '..', not absolute)")
    path = os.path.join(root, name)
    inside = os.path.realpath(root)
    if os.path.commonpath([inside, os.path.realpath(path)]) != inside:
        raise ValueError(f"bundle {name!r} leads out of {root} through a symbolic link")
    return path


def check_cases(manifest: Any, root: str) -> list[dict[str, Any]]:
    """The cases of a parsed ``check.json``, each checked (known model, a dataset name, numbers
    of the right types and ranges, a bundle inside ``root``); a ``ValueError`` names the first
    that is not."""
    if not isinstance(manifest, dict) or not isinstance(manifest.get("cases"), list):
        raise ValueError("the manifest must be an object with a list of 'cases'")
    cases = manifest["cases"]
    for i, case in enumerate(cases):
        where = f"cases[{i}]"
        if not isinstance(case, dict):
            raise ValueError(f"{where} must be an object")
        if case.get("model") not in MODELS:
            raise ValueError(f"{where}.model must be one of {', '.join(MODELS)}")
        if not isinstance(case.get("dataset"), str) or not case["dataset"].isidentifier():
            raise ValueError(f"{where}.dataset must be a dataset name")
        scale = case.get("scale")
        if isinstance(scale, bool) or not isinstance(scale, int | float) or not 0 < scale <= 1e3:
            raise ValueError(f"{where}.scale must be a positive number")
        for key, hi in (("seed", 2**63 - 1), ("in_dim", 2**20), ("hidden", 2**20), ("heads", 256)):
            v = case.get(key)
            low = 0 if key == "seed" else 1
            if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= hi:
                raise ValueError(f"{where}.{key} must be an int from {low} to {hi}")
        bundle_path(root, case.get("bundle"))
    return cases


# ---------------------------------------------------------------------------------------------
# One case
# ---------------------------------------------------------------------------------------------


def _values(out: Any) -> list[torch.Tensor]:
    if isinstance(out, dict):
        return [v for _, v in sorted(out.items()) if v is not None]
    return [out]


def _loss(out: Any) -> torch.Tensor:
    return sum(v.square().sum() for v in _values(out))  # type: ignore[return-value]


def relative_error(have: torch.Tensor, want: torch.Tensor) -> float:
    """``max |have - want| / max(1, max |want|)``."""
    scale = max(1.0, want.abs().max().item()) if want.numel() else 1.0
    return (have - want).abs().max().item() / scale if want.numel() else 0.0


def _setup(case: dict[str, Any], device: torch.device) -> tuple[Any, Any, Any, Callable]:
    """(graph, PyG layer, inputs, PyG forward) of a case, seeded as at build time."""
    from torch_geometric import nn as pyg_nn

    from hector import datasets

    ds = datasets.load(f"synthetic:{case['dataset']}", scale=case["scale"], seed=case["seed"])
    g = ds.hetero_graph()
    torch.manual_seed(case["seed"])
    gen = torch.Generator().manual_seed(case["seed"])
    in_dim, hidden, heads = case["in_dim"], case["hidden"], case["heads"]
    if case["model"] == "hgt":
        counts, eid = ds.pyg_hetero()
        conv = pyg_nn.HGTConv(in_dim, hidden, ds.metadata(), heads=heads).to(device)
        with torch.no_grad():  # priors and skips away from their initial 1
            for p in conv.p_rel.values():
                p.uniform_(0.5, 1.5)
        x: Any = {t: torch.randn(n, in_dim, generator=gen).to(device) for t, n in counts.items()}
        eid = {k: v.to(device) for k, v in eid.items()}
        return g, conv, x, lambda c, xx: c(xx, eid)
    edge_index, edge_type = (t.to(device) for t in ds.pyg_homogeneous())
    x = torch.randn(ds.num_nodes, in_dim, generator=gen).to(device)
    if case["model"] == "rgcn":
        conv = pyg_nn.RGCNConv(in_dim, hidden, ds.num_relations, aggr="mean").to(device)
    else:
        conv = pyg_nn.RGATConv(in_dim, hidden, ds.num_relations, heads=heads).to(device)
    with torch.no_grad():
        torch.nn.init.normal_(conv.bias)
    return g, conv, x, lambda c, xx: c(xx, edge_index, edge_type)


def _hector_forward(model: str, fn: rb.BundleFunction, g: Any) -> Callable[[Any, Any], Any]:
    def forward(conv: Any, x: Any) -> Any:
        if model == "hgt":
            return hgt_outputs(conv, fn(g, *hgt_args(conv, x)), x)
        return fn(g, *(rgcn_args if model == "rgcn" else rgat_args)(conv, x))

    return forward


def _fresh(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: v.detach().clone().requires_grad_() for k, v in x.items()}
    return x.detach().clone().requires_grad_()


def _step(conv: Any, forward: Callable[[Any, Any], Any], x: Any) -> tuple[Any, Any]:
    conv.zero_grad(set_to_none=True)
    xs = _fresh(x)
    out = forward(conv, xs)
    _loss(out).backward()
    return out, xs


def _errors(ref: tuple, have: tuple, ref_conv: Any, conv: Any) -> dict[str, float]:
    """Relative errors of the outputs, the inputs' gradients and every parameter gradient."""
    (ref_out, ref_x), (out, x) = ref, have
    errors: dict[str, float] = {}
    if isinstance(ref_out, dict):
        for k, v in out.items():
            if ref_out.get(k) is None:  # PyG: a node type no edge reaches has no output
                raise ValueError(f"the bundle gives node type {k!r} an output, PyG does not")
            errors[f"out[{k}]"] = relative_error(v, ref_out[k])
        for k in x:
            errors[f"grad x[{k}]"] = relative_error(x[k].grad, ref_x[k].grad)
    else:
        errors["out"] = relative_error(out, ref_out)
        errors["grad x"] = relative_error(x.grad, ref_x.grad)
    mine = dict(conv.named_parameters())
    for name, p in ref_conv.named_parameters():
        if p.grad is not None and mine[name].grad is not None:
            errors[f"grad {name}"] = relative_error(mine[name].grad, p.grad)
    return errors


def _time(step: Callable[[], Any], runs: int, device: torch.device) -> float:
    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    step()  # warm-up (module load, caching allocator)
    sync()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        step()
        sync()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def check_case(
    case: dict[str, Any],
    root: str,
    runs: int,
    device: torch.device,
    tolerance: float = TOLERANCE,
    driver: Any = None,
) -> dict[str, Any]:
    """Run one case: errors against PyG, then timings; a record for the report.

    ``driver`` stands in for the CUDA driver (with CPU tensors), to test this without a GPU."""
    record: dict[str, Any] = {k: case[k] for k in ("model", "dataset", "bundle")}
    fn = rb.load(bundle_path(root, case["bundle"]), driver)
    fn.events = []
    g, ref_conv, x, pyg_forward = _setup(case, device)
    conv = copy.deepcopy(ref_conv)
    forward = _hector_forward(case["model"], fn, g)
    errors = _errors(_step(ref_conv, pyg_forward, x), _step(conv, forward, x), ref_conv, conv)
    worst = max(errors.values())
    steps = fn.events
    record.update(
        status="PASSED" if worst <= tolerance else "FAILED",
        max_rel_err=worst,
        errors=errors,
        launches=sum(1 for e in steps if e.op == "launch"),
        skipped_launches=sum(1 for e in steps if e.op == "skip"),
    )
    fn.events = None
    record["hector_ms"] = _time(lambda: _step(conv, forward, x), runs, device)
    record["pyg_ms"] = _time(lambda: _step(ref_conv, pyg_forward, x), runs, device)
    record["speedup"] = record["pyg_ms"] / record["hector_ms"]
    return record


# ---------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python3 -m hector_bench.bundle_check",
        description="Run prebuilt Hector bundles against PyG on CUDA (outputs, gradients, time).",
    )
    p.add_argument("--bundles", required=True, help=f"directory with {CHECK_FILE} and bundles")
    p.add_argument("--out", required=True, help="JSON report to write")
    p.add_argument("--runs", type=int, default=5, help="timed training steps per system")
    p.add_argument("--tolerance", type=float, default=TOLERANCE, help="largest relative error")
    p.add_argument("--only", action="append", default=[], help="run cases whose name has this")
    return p


def _line(r: dict[str, Any]) -> str:
    name = f"{r['model']:<5} {r['dataset']:<7}"
    if r["status"] == "ERROR":
        return f"{name} ERROR   {r['error']}"
    return (
        f"{name} {r['status']:<7} max rel err {r['max_rel_err']:.1e}  hector {r['hector_ms']:8.2f}"
        f" ms  pyg {r['pyg_ms']:8.2f} ms  speed-up {r['speedup']:5.2f}x  ({r['launches']} "
        f"launches, {r['skipped_launches']} skipped)"
    )


def run(argv: Sequence[str] | None = None) -> int:
    """The command; returns the exit status."""
    args = _parser().parse_args(argv)
    manifest_path = os.path.join(args.bundles, CHECK_FILE)
    try:
        with open(manifest_path, encoding="utf-8") as f:
            cases = check_cases(json.load(f), args.bundles)
    except (OSError, ValueError, RecursionError) as err:
        print(f"error: cannot read {manifest_path}: {err}", file=sys.stderr)
        return 2
    cases = [c for c in cases if all(o in c["bundle"] for o in args.only)]
    if not cases:
        print("error: no cases to check", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("error: bundle_check needs a CUDA device (torch.cuda.is_available() is False)")
        return 2
    device = torch.device("cuda")
    records = []
    for case in cases:
        try:
            record = check_case(case, args.bundles, args.runs, device, args.tolerance)
        except Exception as err:  # noqa: BLE001 — one failed case must not hide the others
            record = {k: case.get(k) for k in ("model", "dataset", "bundle")}
            record.update(status="ERROR", error=f"{type(err).__name__}: {err}")
            record["traceback"] = traceback.format_exc(limit=8)
        records.append(record)
        print(_line(record), flush=True)
        torch.cuda.empty_cache()
    report = {
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(device),
        "runs": args.runs,
        "tolerance": args.tolerance,
        "cases": records,
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1)
    failed = [r for r in records if r["status"] != "PASSED"]
    print(f"{len(records) - len(failed)} of {len(records)} cases passed; report: {args.out}")
    return 1 if failed else 0


# ---------------------------------------------------------------------------------------------
# The bundles the GPU check runs: scripts/build_carry.sh builds them, this module checks them
# ---------------------------------------------------------------------------------------------

#: (model, dataset) pairs of the GPU check: RGCN, RGAT and HGT training on the replicas of AIFB,
#: MUTAG and BGS, 32 features in and out, 2 heads for RGAT and HGT.
CHECK_CASES: tuple[tuple[str, str], ...] = tuple(
    (m, d) for d in ("aifb", "mutag", "bgs") for m in ("rgcn", "rgat", "hgt")
)


def check_layer(model: str, ds: Any, in_dim: int, hidden: int, heads: int) -> Any:
    """The Hector layer of a check case (its weights do not matter: only shapes reach the
    bundle; the check derives the arguments from the PyG layer)."""
    from hector.models import HGTLayer, RGATLayer, RGCNLayer

    if model == "rgcn":
        return RGCNLayer(in_dim, hidden, ds.num_relations)
    if model == "rgat":
        return RGATLayer(in_dim, hidden, ds.num_relations, heads=heads)
    types, relations = ds.metadata()
    return HGTLayer(in_dim, hidden, types, relations, heads=heads)


def build_check_bundles(
    out_dir: str | os.PathLike[str],
    *,
    cases: Sequence[tuple[str, str]] = CHECK_CASES,
    scale: float = 1.0,
    seed: int = 0,
    in_dim: int = 32,
    hidden: int = 32,
    heads: int = 2,
    chip: str = "sm_90",
) -> list[dict[str, Any]]:
    """Build a training bundle per ``(model, dataset)`` under ``out_dir`` and the manifest
    ``check.json`` that ``python3 -m hector_bench.bundle_check --bundles out_dir`` reads;
    returns the cases."""
    import torch

    from hector import datasets
    from hector.bundle import build

    os.makedirs(out_dir, exist_ok=True)
    records = []
    for model, name in cases:
        ds = datasets.load(f"synthetic:{name}", scale=scale, seed=seed)
        g = ds.hetero_graph()
        torch.manual_seed(seed)
        layer = check_layer(model, ds, in_dim, hidden, heads)
        if model == "hgt":
            counts, _ = ds.pyg_hetero()
            x: Any = {t: torch.randn(n, in_dim) for t, n in counts.items()}
        else:
            x = torch.randn(ds.num_nodes, in_dim)
        bundle_name = f"{model}-{name}"
        build(layer, g, x, out=os.path.join(out_dir, bundle_name), chip=chip)
        records.append(
            {
                "model": model,
                "dataset": name,
                "scale": scale,
                "seed": seed,
                "in_dim": in_dim,
                "hidden": hidden,
                "heads": heads if model != "rgcn" else 1,
                "bundle": bundle_name,
            }
        )
    with open(os.path.join(out_dir, CHECK_FILE), "w", encoding="utf-8") as f:
        json.dump({"version": 1, "chip": chip, "cases": records}, f, indent=1)
    return records


if __name__ == "__main__":
    sys.exit(run())
