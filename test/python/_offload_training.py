"""What the tensor-cache tests share: the small GPT they train, a training loop with and
without offloading, the keep-all reference and the bit-identity check."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

import hector
from hector_bench.offload_models import build_model

VOCAB, SEQ = 128, 32
HAS_CUDA = torch.cuda.is_available()


def one_intra_op_thread():
    """Generator for a module fixture: one intra-op thread while the module's tests run (the
    I/O workers get the other core, and runs are steadier)."""
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


def keep_all_reference():
    """Losses and last gradients of 20 keep-all steps, at the current intra-op thread count
    (computed once per process and count: a module that trains on one thread compares with a
    reference trained on one, whatever ran before it in the process)."""
    return _keep_all_reference(torch.get_num_threads())


@functools.cache
def _keep_all_reference(threads: int):
    """:func:`keep_all_reference` at ``threads`` intra-op threads (the cache's key)."""
    assert torch.get_num_threads() == threads
    return _train(None)


def _same(a, b):
    assert a[0] == b[0]  # bit-identical losses
    assert all(torch.equal(x, y) for x, y in zip(a[1], b[1], strict=True))
