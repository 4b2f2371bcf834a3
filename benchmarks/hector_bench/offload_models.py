"""Small transformer models for offload tests and ``hector bench offload`` (random init).

:class:`GPT` is a GPT-2-style decoder (pre-LayerNorm blocks, causal attention, GELU MLP);
:class:`BERT` a BERT-style encoder (post-LayerNorm blocks, bidirectional attention, an MLM head).
Both take int64 token ids ``[batch, seq]`` and return logits ``[batch, seq, vocab]``; their
blocks live in ``blocks`` (a ModuleList), so each block is one offload scope.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["BERT", "GPT", "build_model"]


class _Attention(nn.Module):
    def __init__(self, hidden: int, heads: int, causal: bool) -> None:
        super().__init__()
        self.heads = heads
        self.causal = causal
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, h = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, h // self.heads).unbind(2)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.proj(y.transpose(1, 2).reshape(b, s, h))


class _MLP(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.fc = nn.Linear(hidden, 4 * hidden)
        self.proj = nn.Linear(4 * hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(F.gelu(self.fc(x)))


class _DecoderBlock(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(hidden)
        self.attn = _Attention(hidden, heads, causal=True)
        self.ln2 = nn.LayerNorm(hidden)
        self.mlp = _MLP(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class _EncoderBlock(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.attn = _Attention(hidden, heads, causal=False)
        self.ln1 = nn.LayerNorm(hidden)
        self.mlp = _MLP(hidden)
        self.ln2 = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.ln1(x + self.attn(x))
        return self.ln2(x + self.mlp(x))


class _Embed(nn.Module):
    def __init__(self, vocab: int, seq: int, hidden: int, norm: bool) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab, hidden)
        self.pos = nn.Embedding(seq, hidden)
        self.norm = nn.LayerNorm(hidden) if norm else nn.Identity()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        return self.norm(self.tok(ids) + self.pos(pos))


class _Head(nn.Module):
    def __init__(self, hidden: int, vocab: int, transform: bool) -> None:
        super().__init__()
        self.transform = nn.Linear(hidden, hidden) if transform else nn.Identity()
        self.norm = nn.LayerNorm(hidden)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.transform(x)
        if not isinstance(self.transform, nn.Identity):
            x = F.gelu(x)
        return self.out(self.norm(x))


class _Transformer(nn.Module):
    """Embeddings, ``layers`` blocks, a head: what the GPT and BERT models share."""

    def __init__(
        self,
        block: type[nn.Module],
        embed_norm: bool,
        head_transform: bool,
        layers: int,
        hidden: int,
        heads: int,
        vocab: int,
        seq: int,
    ) -> None:
        super().__init__()
        if hidden % heads:
            raise ValueError(f"hidden ({hidden}) must be divisible by heads ({heads})")
        self.embed = _Embed(vocab, seq, hidden, norm=embed_norm)
        self.blocks = nn.ModuleList(block(hidden, heads) for _ in range(layers))
        self.head = _Head(hidden, vocab, transform=head_transform)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits ``[batch, seq, vocab]`` for token ids ``[batch, seq]``."""
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class GPT(_Transformer):
    """GPT-2-style decoder: embeddings, ``layers`` pre-LN causal blocks, final LN + LM head."""

    def __init__(
        self, layers: int = 4, hidden: int = 256, heads: int = 4, vocab: int = 1024, seq: int = 256
    ) -> None:
        """Random initialisation."""
        super().__init__(_DecoderBlock, False, False, layers, hidden, heads, vocab, seq)


class BERT(_Transformer):
    """BERT-style encoder: embeddings + LN, ``layers`` post-LN blocks, MLM head."""

    def __init__(
        self, layers: int = 4, hidden: int = 256, heads: int = 4, vocab: int = 1024, seq: int = 256
    ) -> None:
        """Random initialisation."""
        super().__init__(_EncoderBlock, True, True, layers, hidden, heads, vocab, seq)


def build_model(
    kind: str, layers: int, hidden: int, heads: int, vocab: int, seq: int, seed: int = 0
) -> nn.Module:
    """A randomly initialised ``"gpt"`` or ``"bert"`` model, or one of
    :data:`~hector_bench.offload_user_models.USER_MODELS` (deterministic for ``seed``)."""
    from .offload_user_models import USER_MODELS, build_user_model

    torch.manual_seed(seed)
    if kind == "gpt":
        return GPT(layers, hidden, heads, vocab, seq)
    if kind == "bert":
        return BERT(layers, hidden, heads, vocab, seq)
    if kind in USER_MODELS:
        return build_user_model(kind, layers, hidden, heads, vocab, seq)
    raise ValueError(f"unknown model {kind!r}: expected gpt, bert or {', '.join(USER_MODELS)}")
