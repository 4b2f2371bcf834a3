"""Probe (session s17): one small model's steps, four ways, in one process.

Under the caching allocator the cache installs, in ABBA order over six rounds: plain training
(no cache), the cache's hooks keeping everything (``"none"``), the adaptive plan, and
all-offload (the same cache; only the decisions change). Prints one JSON line: each way's
median wall and training-thread CPU time per step, the plan, the hooks' time breakdown.

    python probe_hooks_and_plans.py gpt   # or bert
"""

import json
import statistics
import sys
import time

import torch

from hector.bench.offload import _make_step, run_until_planned
from hector.offload import wrap
from hector.offload.models import build_model

name = sys.argv[1]
torch.set_num_threads(1)
model = build_model(name, 4, 256, 4, 1024, 128)
wrapped = wrap(model, "adaptive")
cfg = {"model": name, "layers": 4, "hidden": 256, "heads": 4, "seq": 128, "batch": 4}
cfg["vocab"] = 1024
step_wrapped = _make_step("hector-adaptive", model, wrapped, cfg)
step_plain = _make_step("keep-all", model, model, cfg)
i = run_until_planned(step_wrapped, wrapped.cache)  # warm-up, profiled and planning steps
for _ in range(3):
    step_wrapped(i)
    i += 1
kinds = ["plain", "none", "adaptive", "all"]
wall: dict[str, list[float]] = {k: [] for k in kinds}
cpu: dict[str, list[float]] = {k: [] for k in kinds}
for _ in range(6):
    for kind in kinds + kinds[::-1]:
        if kind != "plain":
            wrapped.cache.policy = kind
        start, start_cpu = time.perf_counter(), time.thread_time()
        (step_plain if kind == "plain" else step_wrapped)(i)
        i += 1
        cpu[kind].append((time.thread_time() - start_cpu) * 1e3)
        wall[kind].append((time.perf_counter() - start) * 1e3)
out: dict[str, object] = {
    k: {
        "wall": round(statistics.median(wall[k]), 1),
        "thread_cpu": round(statistics.median(cpu[k]), 1),
    }
    for k in kinds
}
out["model"] = name
out["plan"] = wrapped.cache.plan.summary()
out["timing"] = wrapped.cache.time_breakdown()
print(json.dumps(out))
wrapped.close()
