"""``hector bench offload-compiled``: training a compiled model under a memory budget.

    hector bench offload-compiled --steps 6 --json OUT.json
    hector bench offload-compiled --model hf-t5 --width 1024 --heads 16 --steps 4

Trains a model (SGD, cross-entropy on its logits) with each system in its own process, every
system compiled by Inductor. ``--model encoder`` (the default) is a pre-norm
``nn.TransformerEncoder`` language model (``--layers`` 4, ``--width`` 512, ``--heads`` 8,
``--seq`` 512, ``--batch`` 2, ``--vocab`` 4096, dropout 0.1); the other choices are the models
users bring (:data:`hector_bench.offload_user_models.USER_MODELS`: Hugging Face's GPT-2,
Llama, BERT, T5 and ViT, ``nn.TransformerEncoder``, a ViT of PyTorch modules), built from the
same options. No system has code for any model: Hector's planner sees only the graphs Dynamo
and AOTAutograd make.

* ``keep-all``: ``torch.compile(model)``;
* ``keep-all-mmap``: the same with glibc's mmap threshold fixed first (what Hector's budget
  path does on CPU where its caching allocator does not serve:
  :func:`hector.runtime.libc_heap.fix_mmap_threshold`), so the allocator's part of that path's
  peak and step is told apart from its offloading (``--allocator caching`` runs every system
  on the caching allocator the budget path installs);
* ``torch-budget-0.5``: the same with ``torch._functorch.config.activation_memory_budget = 0.5``
  (the partitioner recomputes instead of saving);
* ``hector-1.0`` / ``hector-0.75`` / ``hector-0.5`` / ``hector-0.25``:
  ``torch.compile(model, backend="hector", options={"memory_budget": b})``: each saved value
  kept or offloaded to the SSD store (:mod:`hector.offload.joint`);
* ``hector-0.5-opt``: the same at budget 0.5 with the training's optimizer given to the
  backend (``JointBackend(0.5, optimizer=opt)``): each parameter stepped inside the compiled
  backward as its gradient is complete, the gradient freed there
  (:mod:`hector.offload.joint_grads`).

Per system: the median step time of the steps after the first two, the median CPU time of
those steps (``cpu_step_s``: every thread of the process, the store's I/O included;
``thread_cpu_step_s``: the training thread's; less moved by other processes' load than wall
time), the first step (compile included), the real peak (the process's ``VmHWM`` over every
step, the first included, above its ``VmRSS`` before the first step, the model built),
Dynamo's graphs, graph breaks and recompiles, and for Hector's the saved and offloaded bytes
the plans chose and the bytes the store wrote. With ``--timeline``, where each step's real
peak is (:mod:`hector.offload.memory_timeline`: the resident high-water mark between the
loop's phases and the budget path's runtime calls, each call named by the saved value it
carries): ``peak_at`` per step and ``timeline_last_step``, every interval of the last step
with its seconds. For Hector's systems, ``write_wait_step_s`` / ``read_wait_step_s``: the
median seconds per step the compiled graphs were blocked on the store's writes and reads.

``--paired ROUNDS``: instead, a budgeted compile's step against keep-all's, both in one process,
their steps alternated (:func:`measure_paired`).

On a shared VM the machine's own speed drifts: keep-all's step moved by up to 15% between
processes minutes apart on a quiet 2-core host, more than the ≤ 1.05x a budgeted step is held
to. Here one process builds the model twice from the same seed, compiles one as ``keep-all``
(``torch.compile(model)``) and one as the system measured (the functions
:func:`~hector_bench.offload_compiled.compile_system` uses for it), trains each two steps,
then ``N`` rounds of one step each, the order flipped every round, so a drift lands on both.
Per system: both medians, the median of the rounds' ratios (``paired_ratio``, with every
round's), the training thread's CPU per step against keep-all's, and the seconds per step
the budgeted graphs were blocked on the store's writes and reads.

Memory is not measured here (both models live in the process; the real peak needs a
process of its own: run without ``--paired``). What a budgeted compile does to the process
(the caching CPU allocator it installs) applies to keep-all's later steps too, as it would
to anything else the process runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import types
from collections.abc import Callable
from typing import Any

from hector.tools import cli_args as _args

from . import _common
from .offload_user_models import USER_MODELS

#: Every system compiles in its own process (Hector's path never reads torch's caches: its
#: plan is made while partitioning), so the real peak of each includes its compilation.
NO_COMPILE_CACHE = {"TORCHINDUCTOR_FX_GRAPH_CACHE": "0", "TORCHINDUCTOR_AUTOGRAD_CACHE": "0"}

SYSTEMS = (
    "keep-all",
    "keep-all-mmap",
    "torch-budget-0.5",
    "hector-1.0",
    "hector-0.75",
    "hector-0.5",
    "hector-0.25",
    "hector-0.5-opt",
)


#: ``--model``: the default encoder LM, or a model users bring.
MODELS = ("encoder", *USER_MODELS)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """Options of the compiled-offload benchmark."""
    p.add_argument(
        "--model",
        choices=MODELS,
        default="encoder",
        help="encoder: a pre-norm nn.TransformerEncoder LM (default); or a model users bring: "
        "Hugging Face's GPT-2, Llama, BERT (masked LM), T5 (encoder-decoder), ViT (hf-vit), "
        "nn.TransformerEncoder, a ViT-B-shaped classifier (random init, no download)",
    )
    p.add_argument("--layers", type=_args.LAYERS, default=4)
    p.add_argument("--width", type=_args.WIDTH, default=512)
    p.add_argument("--heads", type=_args.HEADS, default=8)
    p.add_argument("--vocab", type=_args.VOCAB, default=4096, help="vocabulary (ViT: classes)")
    p.add_argument("--seq", type=_args.SEQ, default=512)
    p.add_argument("--batch", type=_args.BATCH, default=2)
    p.add_argument("--steps", type=_args.RUNS, default=6, help="training steps, the first compiles")
    p.add_argument("--threads", type=_args.THREADS_OR_AUTO, default=0, help="0: torch's default")
    p.add_argument("--systems", nargs="+", choices=SYSTEMS, default=list(SYSTEMS))
    p.add_argument(
        "--allocator",
        choices=("pytorch", "caching"),
        default="pytorch",
        help="CPU allocator of every system's process (caching: Hector's, installed first)",
    )
    p.add_argument(
        "--timeline",
        action="store_true",
        help="record where in each step the real peak is (hector.offload.memory_timeline: "
        "the peak between the loop's phases and the budget path's runtime calls)",
    )
    p.add_argument(
        "--paired",
        type=_args.RUNS,
        default=0,
        metavar="ROUNDS",
        help="instead: each system but keep-all in one process with keep-all, their steps "
        "alternated for ROUNDS rounds (measure_paired: the step ratio without "
        "the drift between processes; no memory figures)",
    )
    p.add_argument("--json", help="write the record here")


def _model(cfg: dict[str, Any]) -> Any:
    import torch
    from torch import nn

    from .offload_user_models import build_user_model

    class LM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(cfg["vocab"], cfg["width"])
            layer = nn.TransformerEncoderLayer(
                cfg["width"],
                cfg["heads"],
                4 * cfg["width"],
                dropout=0.1,
                batch_first=True,
                norm_first=True,
            )
            self.encoder = nn.TransformerEncoder(layer, cfg["layers"], enable_nested_tensor=False)
            self.head = nn.Linear(cfg["width"], cfg["vocab"])

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.encoder(self.emb(x)))

    torch.manual_seed(0)
    if cfg["model"] == "encoder":
        return LM()
    shape = (cfg["layers"], cfg["width"], cfg["heads"], cfg["vocab"], cfg["seq"])
    return build_user_model(cfg["model"], *shape)


def _batch(cfg: dict[str, Any]) -> tuple[Any, Any]:
    """The one batch every step trains on: its input and its targets."""
    import torch

    from .offload_user_models import make_input

    gen = torch.Generator().manual_seed(1)
    kind = "hf-gpt2" if cfg["model"] == "encoder" else cfg["model"]  # token ids
    return make_input(kind, cfg["batch"], cfg["seq"], cfg["vocab"], gen)


def compile_system(system: str, model: Any, optimizer: Any = None) -> tuple[Any, Any]:
    """``model`` compiled as ``system`` (a :data:`SYSTEMS` name) and, for Hector's, its
    backend (``backend.joint.plans``); ``hector bench offload``'s budgeted compiled systems
    compile through here too. ``optimizer``: the training's, for the ``-opt`` systems."""
    import torch

    if system == "keep-all":
        return torch.compile(model), None
    if system == "keep-all-mmap":
        from hector.runtime import libc_heap

        libc_heap.fix_mmap_threshold()
        return torch.compile(model), None
    if system == "torch-budget-0.5":
        torch._functorch.config.activation_memory_budget = 0.5
        return torch.compile(model), None
    budget = float(system.split("-")[1])
    if system.endswith("-opt"):
        from hector.offload.joint import JointBackend

        joint = JointBackend(budget, optimizer=optimizer)
        return torch.compile(model, backend=joint), types.SimpleNamespace(joint=joint)
    from hector.dynamo.backend import HectorBackend

    backend = HectorBackend(memory_budget=budget)
    return torch.compile(model, backend=backend), backend


def _trainer(cfg: dict[str, Any], system: str) -> tuple[Callable[..., None], Any]:
    """One training step (SGD, cross-entropy on the logits) of a fresh model compiled as
    ``system``, marking its phases on the timeline it is given, and the system's backend."""
    import torch

    model = _model(cfg)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    given = {"optimizer": opt} if system.endswith("-opt") else {}
    compiled, backend = compile_system(system, model, **given)
    x, y = _batch(cfg)

    def step(timeline: Any = None) -> None:
        timeline = timeline or _NoTimeline()
        timeline.begin_step()
        opt.zero_grad(set_to_none=True)
        logits = compiled(x).reshape(-1, cfg["vocab"])
        timeline.mark("forward")
        loss = torch.nn.functional.cross_entropy(logits, y.reshape(-1))
        timeline.mark("loss")
        loss.backward()
        timeline.mark("backward")
        opt.step()
        timeline.mark("optimizer")

    return step, backend


def measure(payload: dict[str, Any]) -> dict[str, Any]:
    """Train with one system (in its own process); its figures."""
    import torch
    from torch._dynamo.utils import counters

    cfg, system = payload["config"], payload["system"]
    if payload["threads"]:
        torch.set_num_threads(payload["threads"])
    if payload["allocator"] == "caching":
        from hector.offload import enable_caching_allocator

        enable_caching_allocator()
    train, backend = _trainer(cfg, system)
    peaks = _common.StepPeaks()
    peaks.start()  # the RSS before training: the model and optimizer exist, nothing compiled
    timeline = _timeline(payload, peaks)
    tracked = peaks.step(lambda: train(timeline))
    times, cpu, thread, waits = [], [], [], [_store_waits()]
    for _ in range(payload["steps"]):
        t, c, h = time.perf_counter(), time.process_time(), time.thread_time()
        tracked()
        times.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)  # every thread's: the store's I/O included
        thread.append(time.thread_time() - h)  # the training thread's
        waits.append(_store_waits())
    if payload.get("timeline"):
        from hector.offload import memory_timeline

        memory_timeline.active(None)
        steps = range(payload["steps"])
        peaks.absolute = [
            max(i.peak_bytes for i in timeline.intervals if i.step == k) + peaks.baseline_bytes
            for k in steps
        ]
    out: dict[str, Any] = {
        "system": system,
        "step_s": statistics.median(times[2:]) if len(times) > 2 else times[-1],
        "first_step_s": times[0],
        "cpu_step_s": statistics.median(cpu[2:]) if len(cpu) > 2 else cpu[-1],
        "thread_cpu_step_s": statistics.median(thread[2:]) if len(thread) > 2 else thread[-1],
        "peak_rss_bytes": max(peaks.above_baseline()),
        "step_peak_rss_bytes": peaks.above_baseline(),
        "graphs": counters["stats"]["unique_graphs"],
        "graph_breaks": sum(counters["graph_break"].values()),
        "recompiles": sum(counters["recompiles"].values()),
    }
    if backend is not None and backend.joint is not None:
        from hector.offload.joint_ops import tickets

        plans = backend.joint.plans
        out["saved_bytes"] = sum(p.saved_bytes for p in plans)
        out["offloaded_bytes"] = sum(p.offloaded_bytes for p in plans)
        store = tickets().stats().get("store", {})
        out["store_bytes_written"] = store.get("bytes_written", 0)
        # where the store's time went over all steps (ns summed over its threads)
        out["store_ns"] = {k: v for k, v in store.items() if k.endswith("_ns")}
        out["report"] = backend.joint.explain()
        for k, kind in enumerate(("write", "read")):
            per_step = [b[k] - a[k] for a, b in zip(waits, waits[1:], strict=False)]
            out[f"{kind}_wait_step_s"] = statistics.median(per_step[2:] or per_step)
    if payload.get("timeline"):
        out.update(_where(timeline, backend, payload["steps"]))
    return out


def _store_waits() -> tuple[float, float]:
    """Seconds the budget path's graphs have waited on the store's writes and reads so far."""
    from hector.offload.joint_ops import tickets

    t = tickets()
    return t.write_wait_s, t.read_wait_s


class _NoTimeline:
    """The marks of a run without ``--timeline``: none."""

    def begin_step(self) -> None:
        """Nothing."""

    def mark(self, label: str) -> None:
        """Nothing."""


def _timeline(payload: dict[str, Any], peaks: Any) -> Any:
    """A started :class:`~hector.offload.memory_timeline.MemoryTimeline`, marked by the
    budget path's runtime calls too, if ``--timeline``; else marks that do nothing. The
    timeline resets the high-water mark at every mark, so each step's peak is then the
    highest of its intervals (``peaks`` records none itself)."""
    if not payload.get("timeline"):
        return _NoTimeline()
    from hector.offload import memory_timeline

    timeline = memory_timeline.MemoryTimeline()
    timeline.start()
    timeline.baseline_bytes = peaks.baseline_bytes
    memory_timeline.active(timeline)
    peaks.active = False
    return timeline


def _where(timeline: Any, backend: Any, steps: int) -> dict[str, Any]:
    """Where each step's real peak is (the interval and its marks, ticket numbers named by
    the saved value they carry), and the last step's whole timeline."""
    names = _ticket_names(backend)
    out: dict[str, Any] = {"peak_at": [], "timeline_last_step": []}
    for k in range(steps):
        top = timeline.peak(k)
        if top is not None:
            out["peak_at"].append(
                {
                    "step": k,
                    "from": names(top.start),
                    "to": names(top.end),
                    "peak_bytes": top.peak_bytes,
                }
            )
    for r in timeline.to_records(steps - 1):
        out["timeline_last_step"].append({**r, "from": names(r["from"]), "to": names(r["to"])})
    out["timeline_report"] = timeline.report(steps - 1)
    return out


def _ticket_names(backend: Any) -> Any:
    """A function naming a runtime call's label (``get 12``) by the saved value its ticket
    carries: tickets are numbered in put order, the same order every step (one graph)."""
    plans = backend.joint.plans if backend is not None and backend.joint is not None else []
    order = [name for p in plans for name in p.put_order]

    def name(label: str) -> str:
        head, _, number = label.rpartition(" ")
        if not order or not number.isdigit() or head == "step":  # a parameter's slot
            return label
        return f"{head} {order[(int(number) - 1) % len(order)]}"

    return name


def run(args: argparse.Namespace) -> int:
    """Run each system in its own process, print a table, write the record."""
    if args.width % args.heads:
        print("error: --width must be divisible by --heads", file=sys.stderr)
        return 2
    cfg = {k: getattr(args, k) for k in ("model", "layers", "width", "heads", "seq", "batch")}
    cfg["vocab"] = args.vocab
    if args.paired:
        return _run_paired(args, cfg)
    results = []
    for system in args.systems:
        payload = {
            "system": system,
            "config": cfg,
            "steps": args.steps,
            "threads": args.threads,
            "allocator": args.allocator,
            "timeline": args.timeline,
        }
        answer = _common.measure_in_subprocess(
            "hector_bench.offload_compiled", payload, env=NO_COMPILE_CACHE
        )
        answer.setdefault("system", system)
        results.append(answer)
        print(json.dumps({k: v for k, v in answer.items() if k != "report"}), flush=True)
    base = next((r for r in results if r["system"] == "keep-all" and "error" not in r), None)
    for r in results:
        if base is not None and "error" not in r:
            r["step_vs_keep_all"] = r["step_s"] / base["step_s"]
            r["cpu_vs_keep_all"] = r["cpu_step_s"] / base["cpu_step_s"]
            r["peak_vs_keep_all"] = r["peak_rss_bytes"] / max(base["peak_rss_bytes"], 1)
    columns = [
        ("system", "system"),
        ("step_s", "step s"),
        ("step_vs_keep_all", "step/keep-all"),
        ("cpu_step_s", "cpu s"),
        ("cpu_vs_keep_all", "cpu/keep-all"),
        ("first_step_s", "first step s"),
        ("peak_rss_bytes", "peak B"),
        ("peak_vs_keep_all", "peak/keep-all"),
        ("graph_breaks", "breaks"),
        ("offloaded_bytes", "offloaded B"),
    ]
    print(_common.format_table(results, columns))
    record = {
        "benchmark": "offload-compiled",
        "config": {**cfg, "steps": args.steps, "allocator": args.allocator},
        "host": _common.host_info(),
        "results": results,
    }
    if args.json:
        _common.write_json(args.json, record)
    return 0 if all("error" not in r for r in results) else 1


#: Steps each model trains before the paired rounds (the first compiles).
WARMUP = 2


def measure_paired(payload: dict[str, Any]) -> dict[str, Any]:
    """Alternate keep-all's steps with ``payload["system"]``'s in this process; the figures."""
    import torch

    from hector.offload.joint_ops import tickets

    if payload["threads"]:
        torch.set_num_threads(payload["threads"])
    cfg, system, rounds = payload["config"], payload["system"], payload["rounds"]
    base, _ = _trainer(cfg, "keep-all")
    for _ in range(WARMUP):
        base()
    measured, _ = _trainer(cfg, system)
    for _ in range(WARMUP):
        measured()
    wall: dict[str, list[float]] = {"keep-all": [], system: []}
    thread: dict[str, list[float]] = {"keep-all": [], system: []}
    waits = (tickets().write_wait_s, tickets().read_wait_s)
    for r in range(rounds):
        order = [("keep-all", base), (system, measured)]
        for name, step in order if r % 2 == 0 else order[::-1]:
            t, c = time.perf_counter(), time.thread_time()
            step()
            wall[name].append(time.perf_counter() - t)
            thread[name].append(time.thread_time() - c)
    ratios = [b / a for a, b in zip(wall["keep-all"], wall[system], strict=True)]
    return {
        "system": system,
        "rounds": rounds,
        "keep_all_step_s": statistics.median(wall["keep-all"]),
        "step_s": statistics.median(wall[system]),
        "paired_ratio": statistics.median(ratios),
        "ratios": ratios,
        "thread_cpu_ratio": statistics.median(thread[system])
        / statistics.median(thread["keep-all"]),
        "write_wait_step_s": (tickets().write_wait_s - waits[0]) / rounds,
        "read_wait_step_s": (tickets().read_wait_s - waits[1]) / rounds,
    }


PAIRED_COLUMNS = [
    ("system", "system"),
    ("keep_all_step_s", "keep-all s"),
    ("step_s", "step s"),
    ("paired_ratio", "paired step/keep-all"),
    ("thread_cpu_ratio", "thread cpu/keep-all"),
    ("write_wait_step_s", "write wait s"),
    ("read_wait_step_s", "read wait s"),
]


def _run_paired(args: argparse.Namespace, cfg: dict[str, Any]) -> int:
    """``--paired``: each system but keep-all alternated with keep-all in one process."""
    results = []
    for system in (s for s in args.systems if s != "keep-all"):
        payload = {"system": system, "config": cfg, "rounds": args.paired, "threads": args.threads}
        answer = _common.measure_in_subprocess(
            "hector_bench.offload_compiled", payload, env=NO_COMPILE_CACHE
        )
        answer.setdefault("system", system)
        results.append(answer)
        print(json.dumps(answer), flush=True)
    print(_common.format_table(results, PAIRED_COLUMNS))
    if args.json:
        config = {**cfg, "paired_rounds": args.paired}
        record = {"benchmark": "offload-compiled", "config": config, "results": results}
        _common.write_json(args.json, {**record, "host": _common.host_info()})
    return 0 if all("error" not in r for r in results) else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--memory-worker":
        payload = json.loads(sys.argv[2])
        print(json.dumps((measure_paired if "rounds" in payload else measure)(payload)))
    else:
        usage = "usage: python -m hector_bench.offload_compiled --memory-worker JSON"
        print(usage, file=sys.stderr)
        sys.exit(2)
