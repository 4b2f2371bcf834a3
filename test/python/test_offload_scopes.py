"""Offload scopes for any module tree: Hugging Face and plain torch.nn models, at any depth."""

from __future__ import annotations

import pytest
import torch
import transformers
from torch import nn

import hector
from hector.offload import OffloadError, default_scopes
from hector.offload.scopes import AUTO_MIN_BLOCKS, repeated_blocks

VOCAB, SEQ, WIDTH = 64, 16, 32


def _gpt2(layers: int = 2) -> nn.Module:
    cfg = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=SEQ, n_embd=WIDTH, n_layer=layers, n_head=2
    )
    return transformers.GPT2LMHeadModel(cfg)


def _llama() -> nn.Module:
    cfg = transformers.LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=WIDTH,
        intermediate_size=2 * WIDTH,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
    )
    return transformers.LlamaForCausalLM(cfg)


class _Encoder(nn.Module):
    """Embedding, ``nn.TransformerEncoder`` (pre-norm), head: blocks at ``encoder.layers``."""

    def __init__(self, layers: int = 2) -> None:
        super().__init__()
        self.emb = nn.Embedding(VOCAB, WIDTH)
        block = nn.TransformerEncoderLayer(WIDTH, 2, 2 * WIDTH, batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.emb(ids)))


class _Wrapper(nn.Module):
    """A single-child wrapper, as DistributedDataParallel or a training framework adds."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.module = inner

    def forward(self, *args: object, **kwargs: object) -> object:
        return self.module(*args, **kwargs)


def _names(model: nn.Module, granularity: str = "auto") -> list[str]:
    return [n for n, _ in default_scopes(model, granularity)]


def test_the_repeated_blocks_are_found_at_any_depth() -> None:
    assert repeated_blocks(_gpt2()) == "transformer.h"
    assert repeated_blocks(_llama()) == "model.layers"
    assert repeated_blocks(_Encoder()) == "encoder.layers"
    assert repeated_blocks(_Wrapper(_Wrapper(_gpt2()))) == "module.module.transformer.h"


def test_block_scopes_are_the_blocks_and_the_modules_around_them() -> None:
    assert _names(_gpt2(), "block") == [
        "transformer.wte",
        "transformer.wpe",
        "transformer.drop",
        "transformer.h.0",
        "transformer.h.1",
        "transformer.ln_f",
        "lm_head",
    ]
    assert _names(_Encoder(), "block") == ["emb", "encoder.layers.0", "encoder.layers.1", "head"]


def test_auto_splits_few_blocks_into_their_children() -> None:
    names = _names(_gpt2())
    assert "transformer.h.0.attn" in names
    assert "transformer.h.1.mlp" in names
    assert "transformer.h.0" not in names
    assert "model.layers.1.self_attn" in _names(_llama())
    many = _names(_Encoder(layers=AUTO_MIN_BLOCKS))
    assert f"encoder.layers.{AUTO_MIN_BLOCKS - 1}" in many  # enough blocks: whole blocks


def test_a_model_without_repeated_blocks_uses_its_top_level_modules() -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    assert repeated_blocks(model) is None
    assert _names(model, "block") == ["0", "1", "2"]
    with pytest.raises(OffloadError, match="granularity must be one of"):
        default_scopes(model, "tensor")


def _train_lm(make, policy: str | None, steps: int = 3, **kw: object):
    """Losses and last gradients of a few steps of a causal LM (Hugging Face's own loss)."""
    torch.manual_seed(0)
    model = make()
    fwd = model if policy is None else hector.offload(model, policy, threshold=1024, **kw)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        ids = torch.randint(0, VOCAB, (2, SEQ), generator=gen)
        loss = fwd(input_ids=ids, labels=ids).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [p.grad.clone() for p in model.parameters()], fwd


@pytest.mark.parametrize("make", [_gpt2, _llama], ids=["gpt2", "llama"])
def test_hugging_face_models_train_bit_identical_while_offloading(make, tmp_path) -> None:
    want = _train_lm(make, None)
    got = _train_lm(make, "all", root=str(tmp_path))
    assert got[0] == want[0]
    assert all(torch.equal(a, b) for a, b in zip(got[1], want[1], strict=True))
    cache = got[2].cache
    assert cache.stats()["offloaded"] > 0  # the blocks' activations went to the store
    assert any(n.startswith(("transformer.h.1.", "model.layers.1.")) for n in cache.scope_names)
    got[2].close()


def test_adaptive_plans_over_the_blocks_of_a_transformer_encoder(tmp_path) -> None:
    def train(policy):
        torch.manual_seed(0)
        model = _Encoder()
        fwd = model if policy is None else hector.offload(model, policy, root=str(tmp_path))
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        losses = []
        for i in range(5):
            ids = torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(i))
            loss = nn.functional.cross_entropy(fwd(ids).flatten(0, 1), ids.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses, fwd

    want, _ = train(None)
    got, fwd = train("adaptive")
    assert got == want
    assert fwd.cache.plan is not None
    assert set(fwd.cache.plan.decisions) == set(_names(fwd.module))
    fwd.close()


def _trainer_run(tmp_path, offload: bool):
    """Three Hugging Face ``Trainer`` steps on a tiny GPT-2; the logged losses, the final
    parameters and the cache (None without offloading)."""
    torch.manual_seed(0)
    model = _gpt2()
    cache = None
    if offload:  # one call, before the Trainer sees the model
        cache = hector.offload.attach(model, "all", root=str(tmp_path / "root"), threshold=1024)
    ids = torch.randint(0, VOCAB, (8, SEQ), generator=torch.Generator().manual_seed(1))
    data = [{"input_ids": row, "labels": row} for row in ids]
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path / "out"),
        per_device_train_batch_size=2,
        max_steps=3,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        seed=0,
        save_strategy="no",
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return losses, [p.detach().clone() for p in model.parameters()], cache


def test_hugging_face_trainer_trains_bit_identical_with_one_call(tmp_path) -> None:
    want = _trainer_run(tmp_path / "a", offload=False)
    got = _trainer_run(tmp_path / "b", offload=True)
    assert len(got[0]) == 3
    assert got[0] == want[0]
    assert all(torch.equal(a, b) for a, b in zip(got[1], want[1], strict=True))
    assert got[2].stats()["offloaded"] > 0
    got[2].close()


def test_accelerate_prepares_an_attached_model(tmp_path) -> None:
    from accelerate import Accelerator

    def run(offload: bool):
        torch.manual_seed(0)
        model = _Encoder()
        cache = None
        if offload:
            cache = hector.offload.attach(model, "all", root=str(tmp_path), threshold=1024)
        accelerator = Accelerator(cpu=True)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        model, opt = accelerator.prepare(model, opt)
        losses = []
        for i in range(3):
            ids = torch.randint(0, VOCAB, (2, SEQ), generator=torch.Generator().manual_seed(i))
            loss = nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
            accelerator.backward(loss)
            opt.step()
            opt.zero_grad()
            losses.append(loss.item())
        if cache is not None:
            assert cache.stats()["offloaded"] > 0
            cache.close()
        return losses

    assert run(True) == run(False)


def test_an_attached_cache_survives_a_failing_forward_and_detaches_on_close(tmp_path) -> None:
    model = _Encoder()
    cache = hector.offload.attach(model, "all", root=str(tmp_path), threshold=1024)
    with pytest.raises(IndexError):
        model(torch.full((2, SEQ), VOCAB + 5))  # out-of-range token ids: the forward raises
    ids = torch.randint(0, VOCAB, (2, SEQ))
    model(ids).sum().backward()  # the next step runs normally, offloading
    offloaded = cache.stats()["offloaded"]
    assert offloaded > 0
    cache.close()
    assert not model._forward_pre_hooks
    assert not model._forward_hooks  # the model is as it was
    model(ids).sum().backward()
