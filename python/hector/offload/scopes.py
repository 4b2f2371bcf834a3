"""The forward scopes of a model: the modules whose saved tensors the cache groups together."""

from __future__ import annotations

from torch import nn

from .errors import OffloadError

__all__ = ["GRANULARITIES", "default_scopes"]

#: How finely :func:`default_scopes` cuts a model into offload scopes.
GRANULARITIES = ("block", "layer")


def default_scopes(model: nn.Module, granularity: str = "block") -> list[tuple[str, nn.Module]]:
    """The forward scopes of ``model``: its top-level blocks, or (``granularity="layer"``)
    each block's children (a transformer block's norms, attention and MLP).

    Wrappers with a single child (``DistributedDataParallel``, ``OffloadedModule``) are looked
    through; ``ModuleList``/``Sequential`` children are expanded into their elements. Names are
    the qualified names inside ``model``. Layer scopes let a plan spend its overhead budget
    on part of a block; a tensor a block saves outside its children belongs to no scope and
    is kept.
    """
    if granularity not in GRANULARITIES:
        raise OffloadError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
    prefix = ""
    root = model
    while True:
        children = list(root.named_children())
        if len(children) != 1:
            break
        name, child = children[0]
        if isinstance(child, nn.ModuleList | nn.Sequential):
            break
        prefix += name + "."
        root = child
    scopes: list[tuple[str, nn.Module]] = []
    for name, child in root.named_children():
        if isinstance(child, nn.ModuleList | nn.Sequential):
            scopes += [(f"{prefix}{name}.{n}", c) for n, c in child.named_children()]
        else:
            scopes.append((prefix + name, child))
    if granularity == "layer":
        scopes = [
            (f"{name}.{n}", c) if n else (name, c)
            for name, block in scopes
            for n, c in (list(block.named_children()) or [("", block)])
        ]
    return scopes or [(prefix.rstrip(".") or "model", root)]
