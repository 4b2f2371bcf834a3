"""Probe (session s15): in one process under the caching CPU allocator, alternate the adaptive
plan and all-offload step by step (ABBA, 16 steps each) on a small model.

    python probe_adaptive_vs_all.py gpt   # or bert; prints one JSON line
    python probe_adaptive_vs_all.py gpt default   # session s16: nothing installed before the
                                                  # model; the cache installs it (the default)
"""

import json
import statistics
import sys
import time

from hector.runtime import cpu_allocator

if sys.argv[2:] != ["default"]:
    cpu_allocator.install()  # before the model, as the benchmark's +calloc variant does

import torch  # noqa: E402

from hector.bench.offload import _make_step, run_until_planned  # noqa: E402
from hector.offload import wrap  # noqa: E402
from hector.offload.models import build_model  # noqa: E402

name = sys.argv[1]
torch.set_num_threads(1)
model = build_model(name, 4, 256, 4, 1024, 128)
wrapped = wrap(model, "adaptive")
cfg = {"model": name, "layers": 4, "hidden": 256, "heads": 4, "seq": 128, "batch": 4}
step = _make_step("hector-adaptive", model, wrapped, {**cfg, "vocab": 1024})
i = run_until_planned(step, wrapped.cache)  # warm-up, profiled and planning steps
for _ in range(3):
    step(i)
    i += 1
times: dict[str, list[float]] = {"adaptive": [], "all": []}
for policy in ["adaptive", "all", "all", "adaptive"] * 8:
    wrapped.cache.policy = policy  # the same cache and hooks; only the decisions differ
    start = time.perf_counter()
    step(i)
    i += 1
    times[policy].append((time.perf_counter() - start) * 1e3)
pairs = [a / b - 1 for a, b in zip(times["adaptive"], times["all"], strict=True)]
out = {
    "model": name,
    "plan": wrapped.cache.plan.decisions,
    "adaptive_median_ms": statistics.median(times["adaptive"]),
    "all_median_ms": statistics.median(times["all"]),
    "adaptive_vs_all_median_pair": statistics.median(pairs),
    "pairs_min": min(pairs),
    "pairs_max": max(pairs),
    "release_memory": wrapped.cache.release_memory,
    "cpu_allocator": cpu_allocator.stats(),
}
print(json.dumps(out))
wrapped.close()
