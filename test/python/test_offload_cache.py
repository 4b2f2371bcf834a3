"""The tensor cache: bit-identical training, aliasing, what stays, faults, concurrency."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import torch.nn.functional as F
from _offload_training import (
    HAS_CUDA,
    SEQ,
    VOCAB,
    _model,
    _same,
    _train,
    keep_all_reference,
    one_intra_op_thread,
)

import hector
from hector.offload import ChecksumError, OffloadError, OffloadIOError, Plan, PlanError, TensorCache
from hector_bench.offload_models import build_model


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    yield from one_intra_op_thread()


@pytest.fixture(scope="module")
def reference():
    return keep_all_reference()


@pytest.mark.parametrize("policy", ["all", "adaptive", "none"])
def test_gpt_20_steps_bit_identical(reference, policy, tmp_path):
    got = _train(policy, root=str(tmp_path))
    _same(got, reference)
    cache = got[2].cache
    stats = cache.stats()
    if policy == "all":
        assert stats["offloaded"] > 0
        assert stats["store"]["bytes_read"] > 0
    if policy == "none":
        assert stats["offloaded"] == 0
    if policy == "adaptive":
        assert cache.plan is not None
        assert cache.plan.policy == "adaptive"
        assert set(cache.plan.decisions) == {
            n for n, _ in hector.offload.default_scopes(got[2].module)
        }
    store = cache.scheduler.store.opened
    store_dir = store.path if store is not None else None
    got[2].close()
    assert store_dir is None or not os.path.exists(store_dir)
    assert not any(os.scandir(tmp_path)) or all(
        not e.name.startswith("hector-offload-") for e in os.scandir(tmp_path)
    )


def test_bert_and_gradient_accumulation(tmp_path):
    ref = _train(None, steps=3, kind="bert", accumulate=3)
    got = _train("all", steps=3, kind="bert", accumulate=3, root=str(tmp_path))
    _same(got, ref)
    got[2].close()


def test_micro_batches_before_backward(tmp_path):
    """Two forwards, then both backwards (pipeline-style micro-batches)."""
    model = _model()
    wrapped = hector.offload(model, "all", root=str(tmp_path), threshold=1024)
    ids = [
        torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(i))
        for i in range(2)
    ]
    losses = [F.cross_entropy(wrapped(x).reshape(-1, VOCAB), x.reshape(-1)) for x in ids]
    for loss in reversed(losses):
        loss.backward()
    got = [p.grad.clone() for p in model.parameters()]
    wrapped.close()
    model.zero_grad()
    for x in ids:
        F.cross_entropy(model(x).reshape(-1, VOCAB), x.reshape(-1)).backward()
    assert all(
        torch.allclose(a, b, rtol=0, atol=1e-6)
        for a, b in zip(got, [p.grad for p in model.parameters()], strict=True)
    )


def test_aliases_stored_once_and_parameters_kept(tmp_path):
    w = torch.randn(64, 64, requires_grad=True)
    x = torch.randn(256, 64, requires_grad=True)
    with TensorCache("all", root=str(tmp_path), threshold=0) as cache:
        base = x * 2
        a, b = base[:128], base[128:]  # two views of one storage
        y = (a @ w).sum() + (b @ w).sum() + (base.sin()).sum()
    y.backward()
    stats = cache.stats()
    assert stats["aliased"] >= 1
    written = stats["store"]["objects_written"]
    # base's storage once (for both views and sin) + x (for the multiplication is a scalar: no)
    assert written == stats["offloaded"]
    assert stats["offloaded"] < stats["packed"] + stats["aliased"]
    x2 = x.detach().clone().requires_grad_(True)
    w2 = w.detach().clone().requires_grad_(True)
    base2 = x2 * 2
    ((base2[:128] @ w2).sum() + (base2[128:] @ w2).sum() + base2.sin().sum()).backward()
    assert torch.equal(x.grad, x2.grad)
    assert torch.equal(w.grad, w2.grad)
    cache.close()


def test_parameters_and_small_tensors_stay_in_memory(tmp_path):
    model = torch.nn.Linear(512, 512)
    wrapped = hector.offload(model, "all", root=str(tmp_path), threshold=4096)
    x = torch.randn(1, 512, requires_grad=True)  # 2 KiB < threshold
    wrapped(x).sum().backward()
    assert wrapped.cache.counters["offloaded"] == 0
    big = torch.randn(64, 512, requires_grad=True)  # 128 KiB: offloaded; the weight is not
    wrapped(big).sum().backward()
    assert wrapped.cache.counters["offloaded"] == 1
    wrapped.close()


def test_hooks_of_kept_tensors_never_poll_the_store(tmp_path, monkeypatch):
    # A step that keeps everything (adaptive's warm-up and profiled steps, a plan's kept
    # scopes when nothing is offloaded) pays only the hooks' bookkeeping: on the small GPT
    # each native poll cost 5-35 us inside a training step, about 2 ms of a 150 ms step.
    def step(wrapped, seed):
        ids = torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(seed))
        F.cross_entropy(wrapped(ids).reshape(-1, VOCAB), ids.reshape(-1)).backward()

    for policy, polls in (("none", False), ("all", True)):
        wrapped = hector.offload(_model(), policy, root=str(tmp_path / policy), threshold=1024)
        store = wrapped.cache.store  # opened, as the adaptive plan's probe opens it
        calls: list[int] = []
        real = store.completions
        monkeypatch.setattr(
            store, "completions", lambda real=real, calls=calls: calls.append(1) or real()
        )
        for seed in range(2):
            step(wrapped, seed)
        assert bool(calls) == polls, policy
        wrapped.close()


def test_tensor_still_being_written_is_served_from_memory(tmp_path):
    cache = TensorCache("all", root=str(tmp_path), threshold=0)
    t = torch.randn(4 << 20)  # 16 MiB
    handle = cache.saved_hooks.pack(t)
    pending = not cache.store.poll(handle.entry.key)
    out = cache.saved_hooks.unpack(handle)
    assert torch.equal(out, t)
    if pending:
        assert cache.counters["served_from_memory"] == 1
        assert out.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
    del handle, out
    cache.close()


def test_disk_full_keeps_tensor_in_memory(reference, tmp_path):
    # Now with the fault armed from the start: every third write fails with ENOSPC.
    torch.manual_seed(0)
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    wrapped = hector.offload(model, "all", root=str(tmp_path), threshold=1024)
    wrapped.cache.store.inject_fault("write", "enospc", skip=2, count=5)
    gen = torch.Generator().manual_seed(1)
    losses = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(20):
            opt.zero_grad()
            ids = torch.randint(0, VOCAB, (2, SEQ), generator=gen)
            loss = F.cross_entropy(wrapped(ids).reshape(-1, VOCAB), ids.reshape(-1))
            loss.backward()
            losses.append(loss.item())
            opt.step()
    assert losses == reference[0]
    assert all(
        torch.equal(p.grad, g) for p, g in zip(model.parameters(), reference[1], strict=True)
    )
    assert wrapped.cache.counters["write_errors"] == 5
    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(msgs) == 5
    assert all("No space left on device" in m for m in msgs)
    assert all(".bin" in m and "stays in memory" in m for m in msgs)
    path = wrapped.cache.store.path
    wrapped.close()
    assert not os.path.exists(path)


def test_write_error_can_raise(tmp_path):
    model = _model()
    wrapped = hector.offload(
        model, "all", root=str(tmp_path), threshold=1024, on_write_error="raise"
    )
    wrapped.cache.store.inject_fault("write", "eio")
    ids = torch.randint(0, VOCAB, (2, SEQ))

    def train() -> None:
        for _ in range(3):
            F.cross_entropy(wrapped(ids).reshape(-1, VOCAB), ids.reshape(-1)).backward()

    with pytest.raises(OffloadIOError, match="Input/output error"):
        train()
    wrapped.close()
    assert os.listdir(tmp_path) == []


def _forward_offloaded(tmp_path):
    model = _model()
    wrapped = hector.offload(model, "all", root=str(tmp_path), threshold=1024, ahead=0)
    ids = torch.randint(0, VOCAB, (2, SEQ))
    loss = F.cross_entropy(wrapped(ids).reshape(-1, VOCAB), ids.reshape(-1))
    cache = wrapped.cache
    for key in list(cache.scheduler.entries.by_key):  # let every write finish
        cache.store.wait(key)
    with cache.scheduler.lock:
        cache.scheduler.drain()
    return wrapped, loss


def test_corrupted_file_fails_backward_clearly(tmp_path):
    wrapped, loss = _forward_offloaded(tmp_path)
    cache = wrapped.cache
    on_disk = [
        e
        for e in cache.scheduler.entries.by_key.values()
        if e.state == "stored" and e.storage is None
    ]
    assert on_disk
    victim = cache.store.file_of(on_disk[0].key)
    with open(victim, "r+b") as f:
        f.write(b"\xff\xfe\xfd")
    with pytest.raises(ChecksumError, match="checksum mismatch") as info:
        loss.backward()
    assert info.value.filename == victim
    del loss
    wrapped.close()
    assert os.listdir(tmp_path) == []


def test_read_error_fails_backward_clearly(tmp_path):
    wrapped, loss = _forward_offloaded(tmp_path)
    wrapped.cache.store.inject_fault("read", "eio")
    with pytest.raises(OffloadIOError, match=r"read of .*t\d+\.bin failed: Input/output error"):
        loss.backward()
    del loss
    wrapped.close()
    assert os.listdir(tmp_path) == []


def test_plan_file_policy_and_errors(tmp_path):
    names = [n for n, _ in hector.offload.default_scopes(_model())]
    from hector.passes.plan_offload import ScopeProfile

    scopes = [ScopeProfile(n, 1000, 1 << 20) for n in names]
    plan = Plan.from_profile(scopes, 1e12, policy="adaptive")
    assert set(plan.decisions.values()) == {"offload"}
    text = str(plan).replace('"placement.offload"(%arg1)', '"placement.recompute"(%arg1)')
    path = tmp_path / "plan.mlir"
    path.write_text(Plan.from_ir(text).text)
    got = _train(str(path), steps=4, root=str(tmp_path / "root"))
    _same(got, _train(None, steps=4))
    assert got[2].cache.plan.decisions[names[1]] == "recompute"
    got[2].close()

    with pytest.raises(PlanError, match="cannot read plan file"):
        hector.offload(_model(), str(tmp_path / "missing.mlir"))
    bad = tmp_path / "bad.mlir"
    bad.write_text("func.func @f(")
    with pytest.raises(PlanError, match="not a valid placement plan"):
        hector.offload(_model(), str(bad))
    other = Plan.from_profile([ScopeProfile("nope", 1, 1 << 20)], 1e9)
    with pytest.raises(OffloadError, match="the plan names scopes the model does not have: nope"):
        hector.offload(_model(), other)
    with pytest.raises(TypeError, match="expects a torch.nn.Module"):
        hector.offload("model")
    with pytest.raises(OffloadError, match="on_write_error"):
        hector.offload(_model(), "all", on_write_error="ignore")


def test_two_processes_share_one_root(tmp_path):
    code = textwrap.dedent(
        """
        import sys, torch, torch.nn.functional as F, hector
        torch.set_num_threads(1)
        from hector_bench.offload_models import build_model
        torch.manual_seed(0)
        m = build_model("gpt", 2, 64, 4, 128, 32)
        ref = build_model("gpt", 2, 64, 4, 128, 32)
        w = hector.offload(m, "all", root=sys.argv[1], threshold=1024)
        for model in (w, ref):
            for step in range(3):
                ids = torch.randint(0, 128, (2, 32), generator=torch.Generator().manual_seed(step))
                F.cross_entropy(model(ids).reshape(-1, 128), ids.reshape(-1)).backward()
        ok = all(torch.equal(a.grad, b.grad) for a, b in zip(m.parameters(), ref.parameters()))
        w.close()
        print("equal" if ok else "different")
        """
    )
    root = str(tmp_path / "shared")
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, root],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
        assert out.strip() == "equal"
    assert os.listdir(root) == []


# ---- lifecycle (docs/offload.md, "Lifecycle") ----------------------------------------------


def _loss(wrapped, seed: int = 0):
    ids = torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(seed))
    return F.cross_entropy(wrapped(ids).reshape(-1, VOCAB), ids.reshape(-1))


def _grads(model, loss) -> list[torch.Tensor]:
    model.zero_grad()
    loss.backward()
    return [p.grad.clone() for p in model.parameters()]


def test_close_during_a_step_is_an_error_that_changes_nothing(tmp_path):
    model = _model()
    wrapped = hector.offload(model, "all", root=str(tmp_path), threshold=1024)
    loss = _loss(wrapped)
    store_dir = wrapped.cache.store.path
    with pytest.raises(OffloadError, match=r"close\(\) during a step: \d+ saved tensor") as info:
        wrapped.close()
    assert "backward" in str(info.value)
    assert "close(force=True)" in str(info.value)
    del info
    assert not wrapped.closed
    assert os.listdir(tmp_path) == [os.path.basename(store_dir)]  # the same store, no other
    got = _grads(model, loss)  # the step completes normally
    del loss
    wrapped.close()
    assert wrapped.closed
    assert os.listdir(tmp_path) == []
    assert all(torch.equal(a, b) for a, b in zip(got, _grads(model, _loss(model)), strict=True))


def test_force_close_makes_the_pending_backward_fail_clearly(tmp_path):
    wrapped = hector.offload(_model(), "all", root=str(tmp_path), threshold=1024)
    loss = _loss(wrapped)
    assert wrapped.cache.saved_tensors_alive() > 0
    wrapped.close(force=True)
    assert os.listdir(tmp_path) == []
    with pytest.raises(OffloadError, match=r"closed with close\(force=True\) before this backward"):
        loss.backward()
    del loss
    assert os.listdir(tmp_path) == []  # no store was reopened for the backward
    assert wrapped.cache.resident_bytes == 0


@pytest.mark.parametrize("how", ["model", "cache_with", "cache_step", "cache_store"])
def test_a_closed_cache_is_never_reopened(tmp_path, how):
    model = _model()
    wrapped = hector.offload(model, "all", root=str(tmp_path), threshold=1024)
    _loss(wrapped).backward()
    stats = wrapped.cache.stats()
    wrapped.close()
    wrapped.close()  # idempotent
    assert os.listdir(tmp_path) == []
    assert wrapped.cache.stats()["store"]["bytes_written"] == stats["store"]["bytes_written"]
    cache = wrapped.cache

    def use() -> object:
        if how == "model":
            return _loss(wrapped)
        if how == "cache_with":
            with cache:
                return _loss(model)
        if how == "cache_step":
            with cache.step():
                return _loss(model)
        return cache.store

    with pytest.raises(OffloadError, match="closed") as info:
        use()
    assert "hector.offload(model" in str(info.value)  # says what to do
    assert os.listdir(tmp_path) == []
    _loss(model).backward()  # the unwrapped model is untouched: no hooks left


def test_hooks_active_when_the_cache_closes_are_an_error(tmp_path):
    cache = TensorCache("all", root=str(tmp_path), threshold=0)
    x = torch.randn(1024, requires_grad=True)
    with cache.hooks():
        (x * 2).sum().backward()
        cache.close()
        with pytest.raises(OffloadError, match="closed"):
            x.sin()
    assert os.listdir(tmp_path) == []


def test_leaving_a_with_block_on_an_error_closes_without_hiding_it(tmp_path):
    wrapped = hector.offload(_model(), "all", root=str(tmp_path), threshold=1024)
    graph: list[torch.Tensor] = []

    def step() -> None:
        with wrapped:
            graph.append(_loss(wrapped))
            raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"):  # not a "close() during a step" error
        step()
    (loss,) = graph
    assert wrapped.closed
    assert os.listdir(tmp_path) == []
    with pytest.raises(OffloadError, match="closed"):
        loss.backward()


def test_close_after_a_failed_forward_while_its_error_is_held(tmp_path):
    model = _model()
    wrapped = hector.offload(model, "all", root=str(tmp_path), threshold=1024)
    model.head.register_forward_hook(lambda *_: 1 / 0)
    try:
        _loss(wrapped)
    except ZeroDivisionError as err:
        held = err  # its traceback holds the partial graph; that step is over all the same
        wrapped.close()
    assert held is not None
    assert os.listdir(tmp_path) == []


# ---- write errors, whatever the timing of the asynchronous writes -------------------------


def _set_timing(store, timing: str, monkeypatch) -> None:
    """Make write completions visible early (synchronous), naturally, or late (slow disk)."""
    if timing == "early":  # every write is done before write() returns
        write = store.write

        def write_and_wait(address: int, nbytes: int) -> int:
            key = write(address, nbytes)
            with contextlib.suppress(OffloadIOError):
                store.wait(key)
            return key

        monkeypatch.setattr(store, "write", write_and_wait)
    elif timing == "late":  # no completion is seen unless waited for
        monkeypatch.setattr(store, "completions", list)


@pytest.mark.parametrize("timing", ["early", "natural", "late"])
@pytest.mark.parametrize("which", ["first", "middle", "last"])
def test_raise_on_write_error_at_the_end_of_the_forward(tmp_path, monkeypatch, timing, which):
    model = _model()
    wrapped = hector.offload(
        model, "all", root=str(tmp_path), threshold=1024, on_write_error="raise"
    )
    cache = wrapped.cache
    _loss(wrapped).backward()  # a clean step: how many writes and saved tensors one has
    writes, packed = cache.counters["offloaded"], cache.counters["packed"]
    skip = {"first": 0, "middle": writes // 2, "last": writes - 1}[which]
    _set_timing(cache.store, timing, monkeypatch)
    cache.store.inject_fault("write", "eio", skip=skip)
    with pytest.raises(OffloadIOError, match=r"Input/output error") as info:
        _loss(wrapped)
    assert cache.counters["packed"] == 2 * packed  # the whole forward ran, then it raised
    assert info.value.filename == cache.store.file_of(writes + 1 + skip)  # keys count writes
    assert [e.filename for e in cache.errors] == [info.value.filename]
    del info
    # Nothing more is raised later: not at the next step, not at close.
    got = _grads(model, _loss(wrapped, seed=1))
    assert len(cache.errors) == 1
    wrapped.close()
    assert os.listdir(tmp_path) == []
    assert all(torch.equal(a, b) for a, b in zip(got, _grads(model, _loss(model, 1)), strict=True))


@pytest.mark.parametrize("timing", ["early", "natural", "late"])
def test_keep_on_write_error_reports_each_failure_once(reference, tmp_path, monkeypatch, timing):
    torch.manual_seed(0)
    model = _model()
    wrapped = hector.offload(model, "all", root=str(tmp_path), threshold=1024)
    _set_timing(wrapped.cache.store, timing, monkeypatch)
    wrapped.cache.store.inject_fault("write", "enospc", skip=1, count=3)
    ids = torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loss = F.cross_entropy(wrapped(ids).reshape(-1, VOCAB), ids.reshape(-1))
        loss.backward()
    assert loss.item() == reference[0][0]
    msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len(msgs) == 3
    assert all("No space left on device" in m for m in msgs)
    assert wrapped.cache.counters["write_errors"] == 3
    assert len(wrapped.cache.errors) == 3
    wrapped.close()
    assert os.listdir(tmp_path) == []


def test_raise_on_write_error_in_a_with_block_and_flush(tmp_path):
    x = torch.randn(1 << 16, requires_grad=True)
    cache = TensorCache("all", root=str(tmp_path), threshold=0, on_write_error="raise")
    cache.store.inject_fault("write", "enospc")
    with pytest.raises(OffloadIOError, match="No space left"):
        with cache:
            y = x.sin().sin()
    y.backward(torch.ones_like(y))  # the tensor stayed in memory: backward still works
    assert torch.equal(x.grad, (x.sin().cos() * x.cos()).detach())
    del y
    cache.store.inject_fault("write", "eio")
    with cache.hooks():  # without a block, flush() is where the error is raised
        z = x.sin()
    with pytest.raises(OffloadIOError, match="Input/output error"):
        cache.flush()
    cache.flush()  # raised once
    del z
    cache.close()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("window", ["auto", None, 0, 1 << 20])
def test_read_ahead_windows_stay_bit_identical(window, tmp_path):
    ref = _train(None, steps=4)
    got = _train("all", steps=4, root=str(tmp_path), readahead_bytes=window, ahead=2)
    _same(got, ref)
    stats = got[2].cache.stats()
    assert stats["store"]["bytes_read"] > 0
    got[2].close()


def test_a_mixed_plan_offloads_recomputes_and_keeps_bit_identically(tmp_path):
    from hector.passes.plan_offload import ScopeProfile

    # blocks.0 offloaded (much compute to hide it), blocks.1 recomputed (cheap and within the
    # 50% target), head kept (the last scope), embed saves nothing above the threshold.
    mib = 1 << 20
    scopes = [
        ScopeProfile("embed", 1_000, 0),
        ScopeProfile("blocks.0", 500_000_000, mib),
        ScopeProfile("blocks.1", 1_000_000, 64 * mib),
        ScopeProfile("head", 1_000_000, mib),
    ]
    plan = Plan.from_measurements(scopes, [1e9, 1e9, 2e6, 2e6], 1e9, 1e9, overhead_target=0.5)
    assert plan.decisions == {
        "embed": "keep",
        "blocks.0": "offload",
        "blocks.1": "recompute",
        "head": "keep",
    }
    ref = _train(None, steps=4)
    got = _train(plan, steps=4, root=str(tmp_path), granularity="block")
    _same(got, ref)
    assert got[2].cache.stats()["offloaded"] > 0
    got[2].close()


def test_time_breakdown_is_measured(tmp_path):
    _, _, wrapped = _train("all", steps=2, root=str(tmp_path))
    t = wrapped.cache.stats()["timing"]
    assert t["pack_ns"] > 0
    assert t["unpack_ns"] > 0
    assert t["submit_ns"] > 0
    assert t["hooks_ns"] == t["pack_ns"] + t["unpack_ns"] + t["release_ns"]
    inside = t["submit_ns"] + t["write_wait_ns"] + t["read_wait_ns"] + t["alloc_ns"]
    assert t["python_ns"] == max(t["hooks_ns"] - inside - t["staging_ns"] - t["drain_ns"], 0)
    wrapped.close()


def test_adaptive_plans_from_the_measured_step(tmp_path):
    # Two warm-up steps, the profiled one, then two planned steps.
    _, _, wrapped = _train("adaptive", steps=5, root=str(tmp_path))
    cache = wrapped.cache
    assert cache.write_bandwidth > 0
    assert cache.read_bandwidth > 0
    assert 'placement.rule = "hidden-io"' in cache.plan.text
    assert "placement.backward_ns" in cache.plan.text
    # release_memory="advise" on CPU: the plan counts each offloaded byte's page faults, twice
    assert cache.offload_ns_per_byte > 0
    sizes = cache.profiler.sizes  # measured on the pieces the profiled step would offload
    assert sizes
    assert min(sizes) >= cache.threshold
    assert cache.stats()["offload_ns_per_byte"] == cache.offload_ns_per_byte
    assert "placement.offload_ps_per_byte" in cache.plan.text
    # The warm-up and profiled steps offload everything and trim as "all" does; the two
    # planned ones may, within the plan's budget.
    assert cache.plan.trim_budget_ns > 0  # glibc, and the plan offloads
    assert 3 <= cache.counters["heap_trims"] <= 5
    wrapped.close()


def test_layer_granularity_scopes_each_block_s_children(tmp_path, reference):
    names = [n for n, _ in hector.offload.default_scopes(_model(), "layer")]
    assert "blocks.0.attn" in names
    assert "blocks.1.mlp" in names
    assert "blocks.0" not in names
    with pytest.raises(OffloadError, match="granularity must be one of"):
        hector.offload.default_scopes(_model(), "tensor")
    with pytest.raises(OffloadError, match="granularity must be one of"):
        TensorCache("all", granularity="tensor")  # checked without a module too
    got = _train("adaptive", root=str(tmp_path), granularity="layer")
    _same(got, reference)
    assert set(got[2].cache.plan.decisions) == set(names)
    got[2].close()


def _train_on_cuda(policy, root: str, steps: int = 4, keep: bool = False):
    """Train a 4-block GPT on the GPU (math attention: deterministic kernels); return the
    losses, the last gradients, the device peak of allocated bytes over the last two steps
    above what they started with, and the bytes the cache offloaded per step (``keep``: and
    the still open wrapped module, for the caller to inspect and close)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    model = build_model("gpt", layers=4, hidden=256, heads=4, vocab=VOCAB, seq=128, seed=0)
    model = model.cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    fwd = model if policy is None else hector.offload(model, policy, root=root, threshold=1024)
    gen = torch.Generator().manual_seed(1)
    losses, base = [], 0
    with sdpa_kernel(SDPBackend.MATH):
        for step in range(steps):
            ids = torch.randint(0, VOCAB, (4, 128), generator=gen).cuda()
            if step == steps - 2:  # after warm-up: the steady state's peak
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
                base = torch.cuda.memory_allocated()
            opt.zero_grad()
            loss = F.cross_entropy(fwd(ids).reshape(-1, VOCAB), ids.reshape(-1))
            loss.backward()
            opt.step()
            losses.append(loss.item())
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    grads = [p.grad.cpu() for p in model.parameters()]
    offloaded = 0
    if policy is not None:
        offloaded = fwd.cache.counters["bytes_offloaded"] // steps
        if keep:
            return losses, grads, peak, offloaded, fwd
        fwd.close()
    return losses, grads, peak, offloaded


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_offload_is_bit_identical_and_lowers_the_device_peak(tmp_path):
    # On CUDA, saved activations go device -> pinned staging -> store, and come back through
    # pinned read-back buffers; the device memory they held is free at the peak.
    ref = _train_on_cuda(None, str(tmp_path))
    got = _train_on_cuda("all", str(tmp_path))
    assert got[0] == ref[0]  # bit-identical losses
    assert all(torch.equal(x, y) for x, y in zip(got[1], ref[1], strict=True))
    assert got[3] > 0
    # torch.cuda's peak falls with the offloaded bytes (all-offload's last scopes are read
    # back at the peak, so by less than all of them).
    assert ref[2] - got[2] >= got[3] // 4, (ref[2], got[2], got[3])


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_cuda_adaptive_profiles_the_kernels_not_their_queueing_and_trains_identically(tmp_path):
    # The profiled steps' clock waits for the queued kernels (torch.cuda.synchronize): each
    # scope's measured forward covers its kernels, and the plan that follows trains
    # bit-identically to keep-all.
    ref = _train_on_cuda(None, str(tmp_path), steps=6)
    got = _train_on_cuda("adaptive", str(tmp_path), steps=6, keep=True)
    assert got[0] == ref[0]
    assert all(torch.equal(x, y) for x, y in zip(got[1], ref[1], strict=True))
    cache = got[4].cache
    assert cache.plan is not None
    assert cache.profiler.sync is torch.cuda.synchronize
    got[4].close()


def test_adaptive_without_mlir_follows_its_plan_and_trains_identically(
    tmp_path, monkeypatch, reference
):
    # Where the MLIR bindings do not import (the GPU machine's image), the adaptive cache
    # still profiles, plans and offloads: the same decisions, not written as IR.
    import sys

    from hector.offload import PlanWithoutIRWarning

    monkeypatch.setitem(sys.modules, "mlir", None)
    monkeypatch.setitem(sys.modules, "mlir.ir", None)
    with pytest.warns(PlanWithoutIRWarning):  # a target that lets the plan offload blocks
        got = _train("adaptive", root=str(tmp_path), overhead_target=5.0)
    _same(got, reference)
    cache = got[2].cache
    assert cache.plan is not None
    assert cache.plan.text == ""
    assert "offload" in cache.plan.decisions.values()
    assert cache.counters["bytes_offloaded"] > 0
    got[2].close()


def test_profiled_steps_wait_on_the_device_clock_and_planned_steps_do_not(tmp_path):
    # On a GPU the profiled steps' clock must wait for the queued kernels; here the wait is a
    # counter standing in for torch.cuda.synchronize, installed where the forward's start
    # decides it (a module on CUDA).
    calls = {"profiled": 0, "planned": 0}
    model = _model("gpt")
    fwd = hector.offload(model, "adaptive", root=str(tmp_path), threshold=1024)
    cache = fwd.cache
    refresh = cache._refresh_params

    def on_device() -> None:
        refresh()
        phase = "profiled" if cache.profiler.active else "planned"
        cache.profiler.sync = lambda: calls.__setitem__(phase, calls[phase] + 1)

    cache._refresh_params = on_device
    gen = torch.Generator().manual_seed(1)
    for _ in range(6):
        ids = torch.randint(0, VOCAB, (2, SEQ), generator=gen)
        F.cross_entropy(fwd(ids).reshape(-1, VOCAB), ids.reshape(-1)).backward()
    assert cache.plan is not None
    scopes = len(cache.scope_names)
    assert calls["profiled"] >= 3 * 2 * scopes  # warm-up and profiled steps: every boundary
    assert calls["planned"] == 0  # planned steps run as queued
    fwd.close()
