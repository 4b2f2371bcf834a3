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

import hector
from hector.offload import ChecksumError, OffloadError, OffloadIOError, Plan, PlanError, TensorCache
from hector.offload.cache import _TRIM_YIELD_PRIOR
from hector_bench.offload_models import build_model

VOCAB, SEQ = 128, 32
HAS_CUDA = torch.cuda.is_available()


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """One intra-op thread: the I/O workers get the other core, and runs are steadier."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _model(kind: str = "gpt"):
    return build_model(kind, layers=2, hidden=64, heads=4, vocab=VOCAB, seq=SEQ, seed=0)


def _train(policy, steps: int = 20, kind: str = "gpt", accumulate: int = 1, root=None, **kw):
    """Train ``steps`` SGD steps; return (losses, grads of the last step, cache or None)."""
    torch.manual_seed(0)
    model = _model(kind)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    fwd = model
    if policy is not None:
        fwd = hector.offload(model, policy, root=root, threshold=1024, **kw)
    gen = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        for _ in range(accumulate):
            ids = torch.randint(0, VOCAB, (2, SEQ), generator=gen)
            loss = F.cross_entropy(fwd(ids).reshape(-1, VOCAB), ids.reshape(-1)) / accumulate
            loss.backward()
            losses.append(loss.item())
        opt.step()
    grads = [p.grad.clone() for p in model.parameters()]
    return losses, grads, fwd


@pytest.fixture(scope="module")
def reference():
    return _train(None)


def _same(a, b):
    assert a[0] == b[0]  # bit-identical losses
    assert all(torch.equal(x, y) for x, y in zip(a[1], b[1], strict=True))


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
    store_dir = cache._store.path if cache._store is not None else None
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
    handle = cache._pack(t)
    pending = not cache.store.poll(handle.entry.key)
    out = cache._unpack(handle)
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
    for key in list(cache._by_key):  # let every write finish
        cache.store.wait(key)
    with cache._lock:
        cache._drain()
    return wrapped, loss


def test_corrupted_file_fails_backward_clearly(tmp_path):
    wrapped, loss = _forward_offloaded(tmp_path)
    cache = wrapped.cache
    on_disk = [e for e in cache._by_key.values() if e.state == "stored" and e.storage is None]
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
    got = _train(plan, steps=4, root=str(tmp_path))
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
    sizes = cache._profile_sizes  # measured on the pieces the profiled step would offload
    assert sizes
    assert min(sizes) >= cache.threshold
    assert cache.stats()["offload_ns_per_byte"] == cache.offload_ns_per_byte
    assert "placement.offload_ps_per_byte" in cache.plan.text
    # The profiled step never trims; the two planned ones may, within the plan's budget.
    assert cache.plan.trim_budget_ns > 0  # glibc, and the plan offloads
    assert 0 <= cache.counters["heap_trims"] <= 2
    wrapped.close()


def _plan_with_trim_budget(budget_ns: int):
    """A plan for ``_model()`` that offloads, whose forward may spend ``budget_ns`` on trims."""
    from hector.passes.plan_offload import ScopeProfile

    names = [n for n, _ in hector.offload.default_scopes(_model())]
    scopes = [ScopeProfile(n, 1_000_000_000, 1 << 20) for n in names]
    plan = Plan.from_measurements(
        scopes, [2e9] * len(names), 1e12, 1e12, overhead_target=5.0, recompute=False
    )
    assert "offload" in plan.decisions.values()
    return Plan(plan.decisions, plan.policy, plan.text, plan.scopes, plan.nbytes, budget_ns)


@pytest.mark.parametrize(("budget_ns", "trims"), [(1, 0), (10**15, 3)])
def test_a_given_plan_trims_only_within_its_budget(tmp_path, budget_ns, trims):
    # A plan given by the caller was not profiled here: the cost of a trimmed byte is measured
    # on first need (it used to count as free, so any budget trimmed every step).
    _, _, wrapped = _train(_plan_with_trim_budget(budget_ns), steps=3, root=str(tmp_path))
    assert wrapped.cache.counters["heap_trims"] == trims
    assert wrapped.cache._release_ns_per_byte > 0
    if trims:  # each trim measured what it handed back
        assert wrapped.cache.trim_yield != _TRIM_YIELD_PRIOR
        assert 0.0 <= wrapped.cache.trim_yield <= 1.0
    wrapped.close()


def test_the_trim_decision_counts_only_what_a_trim_hands_back(tmp_path, monkeypatch):
    # Free chunks whose pages the cache already dropped are not resident: a trim hands back
    # only a fraction of the heap's free bytes, and only that fraction is faulted in again.
    import hector.offload.cache as cache_mod

    cache = TensorCache(_plan_with_trim_budget(100), _model(), root=str(tmp_path))
    monkeypatch.setattr(cache_mod, "_heap_free_bytes", lambda: 1000)
    cache._release_ns_per_byte = 0.15  # a trim of all 1000 free bytes: 150 ns
    assert cache.trim_yield == _TRIM_YIELD_PRIOR
    cache.trim_yield = 1.0
    assert not cache._trims_heap("backward start")
    cache.trim_yield = 0.6  # 90 ns: within the budget
    assert cache._trims_heap("backward start")
    cache.close()


def _meter_with(steps):
    """A FaultCostMeter that counted ``(offloaded, system_s, faults, trimmed_at, hooks_ns)``
    steps of a fake thread."""
    from hector.offload.fault_cost import FaultCostMeter

    usage = [0.0, 0]
    meter = FaultCostMeter(usage=lambda: (usage[0], usage[1]))
    meter.restart()
    for offloaded, system_s, faults, trimmed_at, hooks_ns in steps:
        usage[0] += system_s
        usage[1] += faults
        meter.mark(offloaded, trimmed_at=trimmed_at, hooks_ns=hooks_ns)
    return meter


def test_trims_count_what_training_paid_per_faulted_byte(tmp_path, monkeypatch):
    # The probe varied 0.43-1.09 ns per byte between the heavier GPT's processes; once the
    # steps tell what a faulted byte costs this process's training thread, trims count that.
    import hector.offload.cache as cache_mod

    cache = TensorCache(
        _plan_with_trim_budget(100), _model(), root=str(tmp_path), trim_rule="measured"
    )
    monkeypatch.setattr(cache_mod, "_heap_free_bytes", lambda: 1000)
    cache._release_ns_per_byte = 0.15  # the probe: a trim of 1000 bytes at 150 ns
    cache.trim_yield = 1.0
    assert not cache._trims_heap("backward start")
    assert cache.stats()["trim_cost_source"] == "probe"
    assert cache.stats()["trim_ns_per_byte"] == 0.15
    assert cache.stats()["trim_rule"] == "model"
    # Two steps that offloaded and trimmed at the forward's end: 0.3 s of system time for
    # 10^6 faulted pages each, 0.073 ns per byte (a trim of 1000 bytes: 73 ns). Nothing yet
    # tells what a step trimming as backward starts spends: the model decides, at that price.
    cache._fault_cost = _meter_with([(True, 0.3, 10**6, "forward end", 0.0)] * 2)
    assert cache._trims_heap("backward start")
    stats = cache.stats()
    assert stats["trim_rule"] == "model"
    assert stats["trim_cost_source"] == "training"
    assert stats["trim_ns_per_byte"] == pytest.approx(0.3e9 / (10**6 * 4096))
    assert stats["probe_ns_per_byte"] == 0.15
    assert stats["fault_cost_steps"]["offloading_steps"] == 2
    assert stats["fault_cost_steps"]["trimmed_steps"] == 2
    cache.close()


def test_by_default_trims_are_decided_by_the_model_at_the_probes_price(tmp_path, monkeypatch):
    # trim_rule="measured" stopped trimming in two runs of one heavier-GPT record after
    # costly steps; the default stays the model's rule, the meter's figure only recorded.
    import hector.offload.cache as cache_mod

    cache = TensorCache(_plan_with_trim_budget(100), _model(), root=str(tmp_path))
    monkeypatch.setattr(cache_mod, "_heap_free_bytes", lambda: 1000)
    cache._release_ns_per_byte = 0.15
    cache.trim_yield = 1.0
    cache._fault_cost = _meter_with([(True, 0.3, 10**6, None, 0.0)] * 2)  # 0.073 ns/B
    assert not cache._trims_heap("backward start")  # 150 ns at the probe's price
    stats = cache.stats()
    assert stats["trim_rule"] == "model"
    assert stats["trim_cost_source"] == "probe"
    assert stats["fault_ns_per_byte"] == pytest.approx(0.3e9 / (10**6 * 4096))
    cache.close()
    with pytest.raises(OffloadError, match="trim_rule must be one of"):
        TensorCache("all", trim_rule="measure")


def test_trims_are_decided_by_what_the_steps_spend_once_they_tell(tmp_path, monkeypatch):
    # The plan budgets its faults (offloaded bytes at its cost per byte) and its trims; once
    # the steps measured what they spend in the kernel and in the hooks, that decides.
    import hector.offload.cache as cache_mod

    plan = _plan_with_trim_budget(100_000_000)  # 0.1 s of trims per step
    plan.offload_ns_per_byte = 1.0
    cache = TensorCache(plan, _model(), root=str(tmp_path), trim_rule="measured")
    cache.counters["bytes_offloaded"] = 200_000_000  # this pass: 0.2 s of modelled faults
    free = [1000]
    monkeypatch.setattr(cache_mod, "_heap_free_bytes", lambda: free[0])
    cache.trim_yield = 1.0
    # Steps without a trim: 0.2 s in the kernel plus 10 ms in the hooks, and the trim's own
    # bytes (0.49 ns each: 0.2 s over 10^5 pages).
    untrimmed = (True, 0.2, 100_000, None, 10_000_000)
    cache._fault_cost = _meter_with([untrimmed] * 2)
    assert cache._trims_heap("backward start")  # 0.21 s and 490 ns, within 0.3 s
    assert cache.stats()["trim_rule"] == "measured"
    free[0] = 200_000_000  # a trim of 0.098 s more: 0.308 s
    assert not cache._trims_heap("backward start")
    # Steps that trimmed as backward started spent 0.25 s, trim included: that decides.
    trimmed = (True, 0.24, 150_000, "backward start", 10_000_000)
    cache._fault_cost = _meter_with([untrimmed] * 2 + [trimmed] * 2)
    free[0] = 300_000_000  # at 0.44 ns per byte (all four steps), a trim of 0.13 s
    assert cache._trims_heap("backward start")
    assert not cache._trims_heap("forward end")  # no step trimmed there: untrimmed + trim
    cache.counters["bytes_offloaded"] = 100_000_000  # 0.1 + 0.1 s budgeted: 0.25 is over
    assert not cache._trims_heap("backward start")
    cache.close()


class _RecordingMeter:
    """Stands in for the cache's FaultCostMeter: records what the cache tells it."""

    def __init__(self) -> None:
        self.calls: list[object] = []

    def mark(self, offloaded, *, trimmed_at=None, hooks_ns=0.0):
        self.calls.append(offloaded if offloaded is None else (offloaded, trimmed_at, hooks_ns > 0))

    def restart(self):
        self.calls.append("restart")

    def ns_per_byte(self):
        return None

    def step_cost_ns(self, trimmed_at):
        return None

    def summary(self):
        return {}


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        # Not the first step (it faults in all it allocates): then each step that offloaded.
        # Each trimmed as its backward started; the hooks' own time counts.
        ("all", [None, None, (True, "backward start", True), (True, "backward start", True)]),
        # Nor the warm-up steps; the profiled step kept everything; the probes after it are
        # not the next step's cost, nor is the first planned step typical.
        ("adaptive", [None, None, None, (False, None, True), "restart", None]),
    ],
)
def test_the_cache_tells_the_fault_meter_each_step(tmp_path, monkeypatch, policy, expected):
    import hector.offload.cache as cache_mod

    meter = _RecordingMeter()
    monkeypatch.setattr(cache_mod, "FaultCostMeter", lambda: meter)
    _, _, wrapped = _train(policy, steps=len(expected) - (policy == "adaptive"), root=str(tmp_path))
    assert meter.calls == expected
    wrapped.close()


def _step_freeing_between_forward_and_backward(fwd, freed: list[str]) -> None:
    """One step of a loop that frees memory after its forward and before its backward (as
    ``zero_grad(set_to_none=True)`` there frees last step's gradients)."""
    ids = torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(1))
    blocks = [torch.ones(8 << 10) for _ in range(256)]  # 32 KiB each: glibc's heap
    loss = F.cross_entropy(fwd(ids).reshape(-1, VOCAB), ids.reshape(-1))
    del blocks
    freed.append("freed")
    loss.backward()
    freed.append("backward done")


def test_the_heap_trim_runs_as_backward_starts_after_what_the_loop_freed(tmp_path, monkeypatch):
    # Trimmed at the forward's end, memory freed before backward (last step's gradients)
    # stayed resident at the peak while backward faulted in the pages the trim handed back.
    import hector.offload.cache as cache_mod

    events: list[str] = []
    trims: list[str] = []
    real = cache_mod._trim_heap
    monkeypatch.setattr(cache_mod, "_trim_heap", lambda: (trims.append(events[-1]), real())[1])
    fwd = hector.offload(_model(), "all", root=str(tmp_path), threshold=1024)
    for _ in range(2):
        events.append("forward")
        _step_freeing_between_forward_and_backward(fwd, events)
    assert trims == ["freed", "freed"]  # once per step, after the free, before backward's end
    assert fwd.cache.trim_point == "backward start"
    assert fwd.cache.stats()["trim_point"] == "backward start"
    fwd.close()


class _MeteredSteps(_RecordingMeter):
    """A fault meter whose steps spent nothing of their own: a trim costs what it hands back."""

    def step_cost_ns(self, trimmed_at):
        return 0.0 if trimmed_at is None else None


@pytest.mark.parametrize(
    ("rule", "metered", "moves"),
    [("model", False, True), ("measured", True, True), ("measured", False, False)],
)
def test_a_trim_that_fits_only_at_the_forward_end_moves_there(
    tmp_path, monkeypatch, rule, metered, moves
):
    # Backward may start with more free memory than the budget pays to hand back (the freed
    # gradients): that step skips its trim; three such steps in a row, and later steps trim
    # at the forward's end. Under trim_rule="measured", misses the model decided (before the
    # steps tell, on the probe alone) never move it: the move is for good.
    import hector.offload.cache as cache_mod

    events: list[str] = []
    trims: list[str] = []
    monkeypatch.setattr(cache_mod, "_trim_heap", lambda: trims.append(events[-1]))
    # 1000 free bytes cost 150 ns against a budget of 100; 100 free bytes cost 15.
    monkeypatch.setattr(
        cache_mod, "_heap_free_bytes", lambda: 1000 if events[-1] == "freed" else 100
    )
    fwd = hector.offload(
        _model(), _plan_with_trim_budget(100), root=str(tmp_path), threshold=1024, trim_rule=rule
    )
    fwd.cache._release_ns_per_byte = 0.15
    fwd.cache.trim_yield = 1.0
    if metered:
        fwd.cache._fault_cost = _MeteredSteps()
    for _ in range(2):  # one miss (the first planned step's) does not move it
        events.append("forward")
        _step_freeing_between_forward_and_backward(fwd, events)
        assert fwd.cache.trim_point == "backward start"
    events.append("forward")
    _step_freeing_between_forward_and_backward(fwd, events)
    assert trims == []  # did not fit as backward started: no trim in those steps
    decision = fwd.cache.stats()["last_trim_decision"]
    assert decision["at"] == "backward start"
    assert decision["fits"] is False
    assert decision["trim_ms"] == pytest.approx(150e-6)
    assert decision["budget_ms"] == pytest.approx(100e-6)
    if not moves:
        assert decision["rule"] == "model"
        assert decision["spent_ms"] is None
        for _ in range(3):
            events.append("forward")
            _step_freeing_between_forward_and_backward(fwd, events)
        assert fwd.cache.trim_point == "backward start"
        assert trims == []
        fwd.close()
        return
    assert decision["rule"] == ("measured" if metered else "model")
    if metered:
        assert decision["spent_ms"] == pytest.approx(150e-6)
    assert fwd.cache.trim_point == "forward end"  # three in a row
    events.append("forward")
    _step_freeing_between_forward_and_backward(fwd, events)
    assert trims == ["forward"]  # at the forward's end, before the loop freed anything
    fwd.close()


def test_the_trim_point_is_an_option(tmp_path, monkeypatch):
    import hector.offload.cache as cache_mod

    events: list[str] = []
    trims: list[str] = []
    monkeypatch.setattr(cache_mod, "_trim_heap", lambda: trims.append(events[-1]))
    fwd = hector.offload(
        _model(), "all", root=str(tmp_path), threshold=1024, trim_point="forward end"
    )
    events.append("forward")
    _step_freeing_between_forward_and_backward(fwd, events)
    assert trims == ["forward"]
    fwd.close()
    with pytest.raises(OffloadError, match="trim_point must be one of"):
        TensorCache("all", trim_point="backward")


def _profiled_bytes(tmp_path, steps: int, warmup_steps: int):
    """Saved bytes per scope the adaptive cache measured after ``steps``, and its plan."""
    _, _, wrapped = _train("adaptive", steps=steps, root=str(tmp_path), warmup_steps=warmup_steps)
    measured = {name: rec[1] for name, rec in wrapped.cache._profile.items()}
    plan = wrapped.cache.plan
    assert wrapped.cache.counters["offloaded"] == 0  # every step so far kept everything
    wrapped.close()
    return measured, plan


def test_adaptive_profiles_only_after_its_warmup_steps(tmp_path):
    # A process's first steps run slower (allocator, caches): a plan measured on them counts
    # its costs against a step longer than training's.
    once, plan = _profiled_bytes(tmp_path, steps=1, warmup_steps=0)
    assert plan is None  # planned when the next forward starts
    assert once
    assert all(once.values())
    after_warmup, plan = _profiled_bytes(tmp_path, steps=2, warmup_steps=1)
    assert plan is None  # the second step was the profiled one
    assert after_warmup == once  # the warm-up step's measurements were dropped, not added
    for bad in (-1, True, 1.5):
        with pytest.raises(OffloadError, match="warmup_steps must be an int >= 0"):
            TensorCache("adaptive", warmup_steps=bad)


def test_a_heap_trim_measures_the_fraction_it_hands_back():
    from hector.offload.cache import _process_resident_bytes, _trim_heap

    _trim_heap()
    blocks = [torch.ones(8 << 10) for _ in range(1024)]  # 32 KiB each: glibc's heap, 32 MiB
    before = _process_resident_bytes()
    del blocks
    fraction = _trim_heap()
    assert fraction is not None
    assert 0.0 < fraction <= 1.0
    assert before - _process_resident_bytes() >= 16 << 20  # the freed blocks left


def test_read_back_buffers_are_in_phase_with_the_store():
    from hector.offload.cache import _BLOCK, _in_phase_buffer

    for phase in (0, 64, 1024, 4032):
        buf, shift = _in_phase_buffer(10_000, phase, pin=False)
        assert buf.numel() == 10_000
        assert buf.dtype == torch.uint8
        assert buf.data_ptr() % _BLOCK == phase
        assert buf.data_ptr() - buf.untyped_storage().data_ptr() == shift
    buf, shift = _in_phase_buffer(100, 8, pin=False)  # not element-safe: a plain buffer
    assert shift == 0
    assert buf.data_ptr() == buf.untyped_storage().data_ptr()


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
    assert cache._profile_sync is torch.cuda.synchronize
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
        phase = "profiled" if cache._profiling else "planned"
        cache._profile_sync = lambda: calls.__setitem__(phase, calls[phase] + 1)

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


@pytest.mark.parametrize("window", [-1, "big", 1.5])
def test_bad_read_ahead_window_is_a_clear_error(window):
    with pytest.raises(OffloadError, match="readahead_bytes must be"):
        TensorCache("all", readahead_bytes=window)


def test_trim_mode_trains_bit_identically_and_bad_modes_are_errors(tmp_path):
    ref = _train(None, steps=3)
    got = _train("all", steps=3, root=str(tmp_path), release_memory="trim")
    _same(got, ref)
    got[2].close()
    with pytest.raises(OffloadError, match="release_memory must be one of"):
        TensorCache("all", release_memory="sometimes")


# ---- release_memory="advise": only offloaded pages leave the process ------------------------


def _resident_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_dropping_pages_returns_them_to_the_operating_system():
    from hector.offload.cache import _drop_pages

    t = torch.ones(64 << 18)  # 64 MiB, every page written
    before = _resident_bytes()
    released = _drop_pages(t.untyped_storage())
    assert released >= (64 << 20) - 2 * os.sysconf("SC_PAGE_SIZE")
    assert before - _resident_bytes() >= 60 << 20
    assert float(t[1 << 20]) == 0.0  # the contents are gone: only for dead memory


def test_advise_mode_trains_bit_identically_and_hands_back_offloaded_pages(tmp_path, reference):
    got = _train("all", root=str(tmp_path), release_memory="advise")
    _same(got, reference)
    stats = got[2].cache.stats()
    assert stats["release_memory"] == "advise"
    assert stats["released_bytes"] > 0
    assert stats["heap_trims"] == 20  # once per forward that offloaded
    assert stats["timing"]["trim_ns"] > 0  # the trims' own time, in the breakdown
    got[2].close()


def _saved_by_mul(cache: TensorCache, make, w: torch.Tensor) -> torch.Tensor:
    """``(make() * w).sum()`` under ``cache``'s hooks, every write finished and collected."""
    with cache.hooks():
        out = (make() * w).sum()
    cache.flush()
    with cache._lock:
        cache._drain()
    return out


def test_advise_mode_never_drops_memory_someone_else_still_holds(tmp_path):
    cache = TensorCache(
        "all", threshold=0, root=str(tmp_path), on_write_error="raise", release_memory="advise"
    )
    w = torch.randn(256, 1024, requires_grad=True)
    held = [torch.randn(256, 1024).exp()]  # allocator-owned, and the caller keeps it
    expect = held[0].clone()
    out = _saved_by_mul(cache, lambda: held[0], w)
    assert cache.counters["offloaded"] >= 1
    assert torch.equal(held[0], expect)  # written and dropped by the cache, not handed back
    assert cache.released_bytes == 0
    held.clear()  # now the cache is the last owner: the next hook hands the pages back
    with cache._lock:
        cache._drain()
    assert cache.released_bytes >= 256 * 1024 * 4 - 2 * os.sysconf("SC_PAGE_SIZE")
    out.backward()
    assert torch.allclose(w.grad, expect)  # read back from the store
    cache.close()


def test_advise_mode_never_drops_memory_owned_outside_torch(tmp_path):
    import numpy as np

    cache = TensorCache(
        "all", threshold=0, root=str(tmp_path), on_write_error="raise", release_memory="advise"
    )
    w = torch.randn(256, 1024, requires_grad=True)
    array = np.full((256, 1024), 3.0, dtype=np.float32)  # numpy's memory: not the cache's
    out = _saved_by_mul(cache, lambda: torch.from_numpy(array), w)
    assert cache.counters["offloaded"] >= 1
    assert cache.released_bytes == 0
    assert (array == 3.0).all()
    out.backward()
    assert torch.all(w.grad == 3.0)
    cache.close()
