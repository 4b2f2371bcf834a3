"""The ``cuda`` target's compile, cold and found in the compilation cache, without a GPU.

``hector bench compile-cuda --model rgcn,rgat --mode training --runs 3 --json FILE``

Each run is two fresh processes sharing a private cache directory of their own: the first
compiles the layer's program for ``--chip`` with an empty cache (the stages, LLVM's NVPTX back
end, then the host code's JIT) and stores it; the second compiles the same program and finds
it (:mod:`hector.targets.cuda_cache`: the host module parsed, then the JIT). Both run under the
emulated CUDA driver (:class:`hector.targets.cuda.FakeCudaRuntime`): compiling is host work,
the same with or without a GPU. Per process the record has ``compile_s`` (``compile_cuda``,
the toolchain's fingerprint aside: it is computed once per process, before the clock starts,
and reported as ``toolchain_s``), ``jit_s`` (the host code's JIT alone, timed again on the
compiled module) and the cache's hits, misses and stores; per model the medians over
``--runs`` and ``warm_over_cold``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import hector
from hector.tools import cli_args as _args

from . import _common

#: The layers (:func:`_traced`).
MODELS = ("rgcn", "rgat")


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of the CUDA compile benchmark."""
    p.add_argument("--model", default="rgcn,rgat", help=f"comma-separated: {', '.join(MODELS)}")
    p.add_argument("--mode", choices=("training", "inference"), default="training")
    p.add_argument("--chip", default="sm_90", help="the GPU architecture compiled for")
    p.add_argument("--width", type=_args.WIDTH, default=16, help="input and output features")
    p.add_argument("--runs", type=_args.RUNS, default=3, help="cold/warm process pairs")
    p.add_argument("--json", default=None, help="write the record here")
    p.add_argument("--worker", help=argparse.SUPPRESS)


def _traced(model: str, width: int) -> Any:
    """The hector_inter program of one layer on 1000 nodes and 3 relations."""
    from hector import models
    from hector.frontends import trace as frontend

    n, r, heads = 1000, 3, 2
    if model == "rgcn":
        shapes = [(n, width), (r, width, width), (width, width), (width,)]
        return frontend.trace(models._rgcn_layer, shapes, name="rgcn_layer")
    hf = heads * width
    shapes = [(n, width), (r, width, hf), (hf, heads), (hf, heads), (hf,)]
    return frontend.trace(models._make_rgat(0.2).fn, shapes, name="rgat_layer")


def _worker(spec: dict[str, Any]) -> dict[str, Any]:
    """One process's compile, timed (runs in a fresh subprocess)."""
    from hector.targets import cuda, cuda_cache, program_cache

    start = time.perf_counter()
    program_cache._toolchain()
    toolchain_s = time.perf_counter() - start
    traced = _traced(spec["model"], spec["width"])
    autodiff = spec["mode"] == "training"
    start = time.perf_counter()
    entry = cuda.compile_cuda(
        traced, autodiff=autodiff, chip=spec["chip"], runtime=cuda.FakeCudaRuntime()
    )
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    cuda.GpuKernel(entry.kernel.module, cuda.FakeCudaRuntime())
    jit_s = time.perf_counter() - start
    return {
        "compile_s": compile_s,
        "jit_s": jit_s,
        "toolchain_s": toolchain_s,
        "cache": dict(cuda_cache.STATS),
    }


def _process(spec: dict[str, Any], cache_dir: str) -> dict[str, Any]:
    env = {**os.environ, "HECTOR_CACHE_DIR": cache_dir, "HECTOR_COMPILE_CACHE": "1"}
    cmd = [sys.executable, "-m", __name__, "--worker", json.dumps(spec)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"{spec['model']}: {why}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _model_row(spec: dict[str, Any], runs: int) -> dict[str, Any]:
    """Cold and warm processes, ``runs`` pairs, each pair with a cache of its own."""
    pairs = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="hector-bench-cache-") as cache_dir:
            pairs.append((_process(spec, cache_dir), _process(spec, cache_dir)))
    row: dict[str, Any] = {"model": spec["model"]}
    for i, name in enumerate(("cold", "warm")):
        for key in ("compile_s", "jit_s", "toolchain_s"):
            row[f"{name}_{key}"] = round(statistics.median(p[i][key] for p in pairs), 4)
        row[f"{name}_cache"] = pairs[-1][i]["cache"]
    row["warm_over_cold"] = round(row["warm_compile_s"] / row["cold_compile_s"], 4)
    row["runs"] = [[cold, warm] for cold, warm in pairs]
    return row


def run(args: argparse.Namespace) -> int:
    """Time the models' cold and warm compiles, print a table, write the record."""
    if args.worker:
        print(json.dumps(_worker(json.loads(args.worker))))
        return 0
    models = [m.strip() for m in args.model.split(",") if m.strip()]
    bad = sorted(set(models) - set(MODELS))
    if bad or not models:
        print(f"error: --model takes {', '.join(MODELS)}; got {args.model!r}", file=sys.stderr)
        return 1
    from hector.lowering.pipelines import check_gpu_chip

    try:
        check_gpu_chip(args.chip)
    except ValueError as err:
        print(f"error: --chip: {err}", file=sys.stderr)
        return 1
    spec = {"mode": args.mode, "chip": args.chip, "width": args.width}
    try:
        rows = [_model_row({**spec, "model": m}, args.runs) for m in models]
    except RuntimeError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    record = {
        "benchmark": "compile-cuda",
        **spec,
        "device": "emulated",
        "hector_version": hector.__version__,
        "host": _common.host_info(),
        "load": os.getloadavg(),
        "results": rows,
    }
    columns = [("model", "model"), ("cold_compile_s", "cold s"), ("warm_compile_s", "warm s")]
    columns += [("warm_over_cold", "warm/cold"), ("warm_jit_s", "JIT s")]
    _common.emit_record(record, _common.format_table(rows, columns), args.json, None, None)
    return 0


if __name__ == "__main__":  # one process of a run (--worker), started by run()
    _parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(_parser)
    sys.exit(run(_parser.parse_args()))
