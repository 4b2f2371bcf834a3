"""Offloading composed with ``torch.compile`` (either order, ``fullgraph=True``): Hector's
hooks never enter a Dynamo graph (no graph break, no recompile), the scopes are the compiled
regions, offloading happens and the gradients are those of the compiled keep-all model.

The backend is ``aot_eager``: AOTAutograd's joint graph and its ``save_for_backward`` (where the
saved-tensor hooks apply) without Inductor's code generation, which would only make the tests
slower.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import torch
import torch._dynamo
from test_offload_scopes import _gpt2, _llama
from torch import nn
from torch._dynamo.utils import counters

import hector

VOCAB, WIDTH, SEQ = 64, 32, 16
BACKEND = "aot_eager"


class _LM(nn.Module):
    """A pre-norm ``nn.TransformerEncoder`` language model (the issue's model, small)."""

    def __init__(self, layers: int = 2) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, WIDTH)
        layer = nn.TransformerEncoderLayer(
            WIDTH, 4, 2 * WIDTH, dropout=0.0, batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(WIDTH)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.encoder(self.emb(x))))


def _model() -> _LM:
    torch.manual_seed(0)
    return _LM()


def _batch() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, VOCAB, (2, SEQ), generator=g), torch.randint(
        0, VOCAB, (2, SEQ), generator=g
    )


def _grads(model: nn.Module, run: Callable[[torch.Tensor], torch.Tensor], steps: int) -> list:
    """Train ``steps`` steps (no optimizer) and return the last step's gradients."""
    x, y = _batch()
    for _ in range(steps):
        model.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(run(x).reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()
    return [p.grad.clone() for p in model.parameters()]


@pytest.fixture(autouse=True)
def _fresh_dynamo() -> Iterator[None]:
    """Each test compiles from scratch, and any recompile is an error."""
    torch._dynamo.reset()
    counters.clear()
    with torch._dynamo.config.patch(error_on_recompile=True):
        yield
    torch._dynamo.reset()


def _breaks() -> int:
    return sum(counters["graph_break"].values())


def _keep_all_grads(steps: int = 3) -> list:
    model = _model()
    compiled = torch.compile(model, backend=BACKEND, fullgraph=True)
    grads = _grads(model, compiled, steps)
    torch._dynamo.reset()
    counters.clear()
    return grads


@pytest.mark.parametrize("order", ["compile_outside", "compile_inside"])
def test_compiled_offloading_has_no_break_nor_recompile(order: str, tmp_path) -> None:
    expected = _keep_all_grads()
    model = _model()
    if order == "compile_outside":  # torch.compile(hector.offload(model))
        offloaded = hector.offload(model, policy="all", threshold=0, root=str(tmp_path))
        run = torch.compile(offloaded, backend=BACKEND, fullgraph=True)
    else:  # hector.offload(torch.compile(model))
        compiled = torch.compile(model, backend=BACKEND, fullgraph=True)
        offloaded = run = hector.offload(compiled, policy="all", threshold=0, root=str(tmp_path))
    grads = _grads(model, run, steps=3)  # error_on_recompile: a recompile raises here
    assert _breaks() == 0, dict(counters["graph_break"])
    # One graph per region class: the embedding, the encoder layers (one graph for both),
    # the final norm, the head.
    assert counters["stats"]["unique_graphs"] == 4
    stats = offloaded.cache.stats()
    assert stats["offloaded"] > 0
    assert stats["bytes_offloaded"] > 0
    for got, want in zip(grads, expected, strict=True):
        assert torch.equal(got, want)
    offloaded.close()


def test_regions_are_the_blocks_and_close_restores_forwards(tmp_path) -> None:
    model = _model()
    offloaded = hector.offload(model, policy="all", threshold=0, root=str(tmp_path))
    assert any(".self_attn" in n for n, _ in offloaded.cache.scope_tracker.scopes)  # eager: layers
    run = torch.compile(offloaded, backend=BACKEND, fullgraph=True)
    _grads(model, run, steps=1)
    names = [n for n, _ in offloaded.cache.scope_tracker.scopes]
    assert names == ["emb", "encoder.layers.0", "encoder.layers.1", "norm", "head"]
    assert offloaded.cache.scope_names == names  # tracked in forward order
    offloaded.close()
    for module in model.modules():
        assert "forward" not in vars(module)


def test_attach_then_compile(tmp_path) -> None:
    expected = _keep_all_grads()
    model = _model()
    cache = hector.offload.attach(model, policy="all", threshold=0, root=str(tmp_path))
    grads = _grads(model, torch.compile(model, backend=BACKEND, fullgraph=True), steps=3)
    assert _breaks() == 0, dict(counters["graph_break"])
    assert counters["stats"]["unique_graphs"] == 4
    assert cache.stats()["offloaded"] > 0
    for got, want in zip(grads, expected, strict=True):
        assert torch.equal(got, want)
    cache.close()


def test_attach_to_a_compiled_model_is_an_error() -> None:
    compiled = torch.compile(_model(), backend=BACKEND)
    with pytest.raises(TypeError, match="attach to it, then torch.compile it"):
        hector.offload.attach(compiled)


def test_adaptive_policy_plans_under_compile(tmp_path) -> None:
    """The adaptive policy profiles the compiled regions and follows its plan, with no
    recompile after the plan is made."""
    expected = _keep_all_grads(steps=5)
    model = _model()
    offloaded = hector.offload(model, warmup_steps=1, threshold=0, root=str(tmp_path))
    run = torch.compile(offloaded, backend=BACKEND, fullgraph=True)
    grads = _grads(model, run, steps=5)
    assert offloaded.cache.plan is not None
    assert _breaks() == 0
    for got, want in zip(grads, expected, strict=True):
        torch.testing.assert_close(got, want)
    offloaded.close()


def test_uncompiled_offloading_is_unchanged(tmp_path) -> None:
    """Without torch.compile no scope forward is replaced and nothing is compiled."""
    model = _model()
    offloaded = hector.offload(model, policy="all", threshold=0, root=str(tmp_path))
    _grads(model, offloaded, steps=1)
    assert counters["stats"]["unique_graphs"] == 0
    assert not any("forward" in vars(m) for m in model.modules())
    offloaded.close()


def test_the_same_offloaded_model_runs_compiled_and_eagerly(tmp_path) -> None:
    """``torch.compile(offloaded)`` compiles; calling ``offloaded`` itself afterwards runs
    eagerly (nothing more compiled), both offloading, both with keep-all's gradients."""
    expected = _keep_all_grads(steps=1)
    model = _model()
    offloaded = hector.offload(model, policy="all", threshold=0, root=str(tmp_path))
    compiled = torch.compile(offloaded, backend=BACKEND, fullgraph=True)
    for got, want in zip(_grads(model, compiled, steps=1), expected, strict=True):
        assert torch.equal(got, want)
    graphs = counters["stats"]["unique_graphs"]
    offloaded_before = offloaded.cache.stats()["offloaded"]
    for got, want in zip(_grads(model, offloaded, steps=1), expected, strict=True):
        torch.testing.assert_close(got, want)
    assert counters["stats"]["unique_graphs"] == graphs
    assert offloaded.cache.stats()["offloaded"] > offloaded_before
    offloaded.close()


@pytest.mark.filterwarnings("error::hector.offload.MemoryBudgetWarning")
def test_a_memory_budget_holds_in_every_compiled_step(tmp_path) -> None:
    """``hector.offload(model, memory_budget=0.8, compile=...)``: the saved activations held
    stay within the budget in every step from the first, with the compiled keep-all's
    gradients (0.8: above what offloading every region of this small model holds)."""
    expected = _keep_all_grads(steps=6)
    model = _model()
    offloaded = hector.offload(
        model,
        memory_budget=0.8,
        warmup_steps=1,
        threshold=0,
        root=str(tmp_path),
        compile={"backend": BACKEND, "fullgraph": True},
    )
    grads = _grads(model, offloaded, steps=6)
    assert _breaks() == 0
    cache = offloaded.cache
    assert cache.plan is not None
    assert max(cache.step_peaks) <= cache.budget_bytes * 1.05
    assert cache.stats()["offloaded"] > 0
    for got, want in zip(grads, expected, strict=True):
        assert torch.equal(got, want)
    offloaded.close()


def _hf_model(name: str) -> nn.Module:
    """The Hugging Face model the scope tests use, seeded."""
    torch.manual_seed(0)
    return _gpt2() if name == "gpt2" else _llama()


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_hugging_face_models_compile_by_regions(name: str, tmp_path) -> None:
    """GPT-2 (whose own forward breaks a whole-model graph: it logs) and Llama, compiled with
    ``fullgraph=True`` around Hector: no break, no recompile (GPT-2's two embeddings, of one
    class and two input shapes, have regions of their own), keep-all's gradients."""
    x = _batch()[0]

    def grads(model: nn.Module, run: Callable[..., object]) -> list:
        for _ in range(2):
            model.zero_grad(set_to_none=True)
            run(input_ids=x, labels=x, use_cache=False).loss.backward()  # type: ignore[attr-defined]
        return [p.grad.clone() for p in model.parameters() if p.grad is not None]

    reference = _hf_model(name)
    with torch._dynamo.config.patch(error_on_recompile=False):
        expected = grads(reference, torch.compile(reference, backend=BACKEND))
    torch._dynamo.reset()
    counters.clear()
    model = _hf_model(name)
    offloaded = hector.offload(model, policy="all", threshold=0, root=str(tmp_path))
    got = grads(model, torch.compile(offloaded, backend=BACKEND, fullgraph=True))
    assert _breaks() == 0, dict(counters["graph_break"])
    assert offloaded.cache.stats()["offloaded"] > 0
    for g, want in zip(got, expected, strict=True):
        assert torch.equal(g, want)
    offloaded.close()
