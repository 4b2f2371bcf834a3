"""Models users bring, for ``hector bench offload --model`` and ``hector bench
offload-compiled --model``: Hugging Face's GPT-2, Llama, BERT (masked LM head), T5
(encoder-decoder) and ViT (image classifier), ``torch.nn.TransformerEncoder`` and a
ViT-B-shaped vision transformer of PyTorch modules (random init from a config: nothing is
downloaded).

Each is the library's own module, built from the bench's ``layers``/``hidden``/``heads``/
``vocab``/``seq`` and wrapped only so that it takes the bench's input and returns logits
(:class:`LogitsOf` for Hugging Face models, :class:`Seq2SeqLogitsOf` for T5); the offload
scopes are found in it by structure (:func:`hector.offload.default_scopes`), as they would be
in a user's model. The language models take token ids ``[batch, seq]`` and return ``[batch,
seq, vocab]`` (T5 reads them in its encoder and, shifted right, in its decoder: teacher
forcing on the same ids; BERT predicts every token, none masked); the vision transformers
(:data:`IMAGE_MODELS`) take images ``[batch, 3, 16p, 16p]`` (``p*p`` patches, ``p =
round(sqrt(seq))``) and return ``[batch, vocab]`` class logits (``vocab`` classes).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

__all__ = [
    "IMAGE_MODELS",
    "USER_MODELS",
    "LogitsOf",
    "Seq2SeqLogitsOf",
    "ViT",
    "build_user_model",
    "make_input",
]


class LogitsOf(nn.Module):
    """A Hugging Face model called on one input, returning its logits: a language model
    (causal or masked) on token ids (``input_ids``), or an image classifier on images
    (``input_name="pixel_values"``)."""

    def __init__(
        self, model: nn.Module, *, use_cache: bool | None = False, input_name: str = "input_ids"
    ) -> None:
        super().__init__()
        self.model = model
        self.input_name = input_name
        self.kwargs = {} if use_cache is None else {"use_cache": use_cache}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits: ``[batch, seq, vocab]`` of token ids, ``[batch, classes]`` of images."""
        return self.model(**{self.input_name: x}, **self.kwargs).logits


class Seq2SeqLogitsOf(nn.Module):
    """A Hugging Face encoder-decoder (T5) called on token ids: the encoder reads them, the
    decoder reads them shifted right behind ``start`` (T5's decoder start token, its padding
    id 0; what the model does with ``labels``); the decoder's logits."""

    def __init__(self, model: nn.Module, start: int = 0) -> None:
        super().__init__()
        self.model = model
        self.start = start

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits ``[batch, seq, vocab]``."""
        first = torch.full_like(ids[:, :1], self.start)
        decoder_ids = torch.cat([first, ids[:, :-1]], dim=1)
        return self.model(input_ids=ids, decoder_input_ids=decoder_ids, use_cache=False).logits


def _block(hidden: int, heads: int, dropout: float) -> nn.TransformerEncoderLayer:
    """A pre-norm transformer block with a GELU MLP four times as wide (GPT-2's, ViT's)."""
    return nn.TransformerEncoderLayer(
        hidden, heads, 4 * hidden, dropout, activation="gelu", batch_first=True, norm_first=True
    )


class _Encoder(nn.Module):
    """Token embedding, ``nn.TransformerEncoder`` (pre-norm, GELU), LM head."""

    def __init__(self, layers: int, hidden: int, heads: int, vocab: int, seq: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.pos = nn.Parameter(torch.zeros(seq, hidden))
        block = _block(hidden, heads, dropout=0.1)  # PyTorch's default
        self.encoder = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.head = nn.Linear(hidden, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits ``[batch, seq, vocab]``."""
        return self.head(self.encoder(self.embed(ids) + self.pos[: ids.shape[1]]))


class ViT(nn.Module):
    """A ViT-B-shaped classifier: 16x16 patch embedding, class token, ``blocks`` (a
    ``Sequential``, as timm names them), final norm, head."""

    def __init__(self, layers: int, hidden: int, heads: int, classes: int, patches: int) -> None:
        super().__init__()
        self.patch_embed = nn.Conv2d(3, hidden, kernel_size=16, stride=16)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, hidden))
        self.pos_embed = nn.Parameter(torch.randn(1, patches + 1, hidden) * 0.02)
        self.blocks = nn.Sequential(*(_block(hidden, heads, dropout=0.0) for _ in range(layers)))
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Linear(hidden, classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        """Class logits ``[batch, classes]``."""
        x = self.patch_embed(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        return self.head(self.norm(self.blocks(x))[:, 0])


def _side(seq: int) -> int:
    return max(1, round(math.sqrt(seq)))


def _hf_gpt2(layers: int, hidden: int, heads: int, vocab: int, seq: int) -> nn.Module:
    import transformers

    cfg = transformers.GPT2Config(
        vocab_size=vocab,
        n_positions=seq,
        n_embd=hidden,
        n_layer=layers,
        n_head=heads,
        bos_token_id=vocab - 1,  # GPT-2's 50256 lies outside a smaller vocabulary
        eos_token_id=vocab - 1,
    )
    return LogitsOf(transformers.GPT2LMHeadModel(cfg))


def _hf_llama(layers: int, hidden: int, heads: int, vocab: int, seq: int) -> nn.Module:
    import transformers

    cfg = transformers.LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=(8 * hidden) // 3,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=seq,
    )
    return LogitsOf(transformers.LlamaForCausalLM(cfg))


def _hf_bert(layers: int, hidden: int, heads: int, vocab: int, seq: int) -> nn.Module:
    import transformers

    cfg = transformers.BertConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        max_position_embeddings=seq,
    )
    return LogitsOf(transformers.BertForMaskedLM(cfg), use_cache=None)


def _hf_t5(layers: int, hidden: int, heads: int, vocab: int, seq: int) -> nn.Module:
    import transformers

    cfg = transformers.T5Config(
        vocab_size=vocab,
        d_model=hidden,
        d_kv=hidden // heads,
        d_ff=4 * hidden,
        num_layers=layers,
        num_decoder_layers=layers,
        num_heads=heads,
    )
    return Seq2SeqLogitsOf(transformers.T5ForConditionalGeneration(cfg))


def _hf_vit(layers: int, hidden: int, heads: int, vocab: int, seq: int) -> nn.Module:
    import transformers

    cfg = transformers.ViTConfig(
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=4 * hidden,
        image_size=16 * _side(seq),
        patch_size=16,
        num_channels=3,
    )
    cfg.num_labels = vocab  # a property of every config, not a typed argument of ViTConfig
    return LogitsOf(
        transformers.ViTForImageClassification(cfg), use_cache=None, input_name="pixel_values"
    )


def _vit(layers: int, hidden: int, heads: int, vocab: int, seq: int) -> nn.Module:
    return ViT(layers, hidden, heads, vocab, _side(seq) ** 2)


#: ``--model`` name → builder ``(layers, hidden, heads, vocab, seq) -> nn.Module``.
USER_MODELS: dict[str, Callable[[int, int, int, int, int], nn.Module]] = {
    "hf-gpt2": _hf_gpt2,
    "hf-llama": _hf_llama,
    "hf-bert": _hf_bert,
    "hf-t5": _hf_t5,
    "hf-vit": _hf_vit,
    "torch-encoder": _Encoder,
    "vit": _vit,
}

#: The :data:`USER_MODELS` that classify images (:func:`make_input` gives images and labels).
IMAGE_MODELS = frozenset({"hf-vit", "vit"})


def build_user_model(
    kind: str, layers: int, hidden: int, heads: int, vocab: int, seq: int
) -> nn.Module:
    """A randomly initialised model of :data:`USER_MODELS` (seeded by the caller)."""
    if hidden % heads:
        raise ValueError(f"hidden ({hidden}) must be divisible by heads ({heads})")
    return USER_MODELS[kind](layers, hidden, heads, vocab, seq)


def make_input(
    kind: str, batch: int, seq: int, vocab: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    """One batch of model ``kind``: its input and the targets of its cross-entropy loss
    (token ids, their own targets; or images and class labels)."""
    if kind in IMAGE_MODELS:
        side = 16 * _side(seq)
        images = torch.randn(batch, 3, side, side, generator=gen)
        return images, torch.randint(0, vocab, (batch,), generator=gen)
    ids = torch.randint(0, vocab, (batch, seq), generator=gen)
    return ids, ids
