"""The tensor cache: bit-identical training, aliasing, what stays, faults, concurrency."""

from __future__ import annotations

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
from hector.offload.models import build_model

VOCAB, SEQ = 128, 32


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
        from hector.offload.models import build_model
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
