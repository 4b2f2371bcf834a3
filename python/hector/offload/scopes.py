"""The forward scopes of a model: the modules whose saved tensors the cache groups together."""

from __future__ import annotations

from torch import nn

from .errors import OffloadError

__all__ = ["AUTO_MIN_BLOCKS", "GRANULARITIES", "default_scopes", "repeated_blocks"]

#: How finely :func:`default_scopes` cuts a model into offload scopes.
GRANULARITIES = ("auto", "block", "layer")
#: ``granularity="auto"`` keeps whole blocks from this many repeated blocks on; below it each
#: block's children are scopes, so the plan still has choices (with ``ahead=1`` the last two
#: scopes forward runs are read back as backward starts and are always kept).
AUTO_MIN_BLOCKS = 8
Scopes = list[tuple[str, nn.Module]]


def repeated_blocks(model: nn.Module) -> str | None:
    """The qualified name of the container of ``model``'s repeated blocks, at any depth: the
    ``ModuleList``/``Sequential`` of at least two children of one class with the most
    parameters (``transformer.h``, ``model.layers``, ``encoder.layer``, ``layers``,
    ``blocks``); None when the model has none."""
    best: tuple[int, str] | None = None
    for name, m in model.named_modules():
        if not isinstance(m, nn.ModuleList | nn.Sequential) or len(m) < 2:
            continue
        if len({type(c) for c in m.children()}) != 1:
            continue
        size = sum(p.numel() for p in m.parameters())
        if size > 0 and (best is None or size > best[0]):
            best = (size, name)
    return None if best is None else best[1]


def _along(node: nn.Module, prefix: str, path: list[str]) -> Scopes:
    """Scopes of ``node``'s children, the one on ``path`` opened: the container at its end
    gives its elements; every other child (embeddings, norms, heads) is a scope of its own."""
    scopes: Scopes = []
    for name, child in node.named_children():
        if not path or name != path[0]:
            scopes.append((prefix + name, child))
        elif len(path) == 1:
            scopes += [(f"{prefix}{name}.{n}", c) for n, c in child.named_children()]
        else:
            scopes += _along(child, f"{prefix}{name}.", path[1:])
    return scopes


def _top_level(model: nn.Module) -> Scopes:
    """Without repeated blocks: the children under single-child wrappers, lists expanded."""
    prefix, root = "", model
    while len(children := list(root.named_children())) == 1:
        name, child = children[0]
        if isinstance(child, nn.ModuleList | nn.Sequential):
            break
        prefix, root = prefix + name + ".", child
    scopes: Scopes = []
    for name, child in root.named_children():
        if isinstance(child, nn.ModuleList | nn.Sequential):
            scopes += [(f"{prefix}{name}.{n}", c) for n, c in child.named_children()]
        else:
            scopes.append((prefix + name, child))
    return scopes or [(prefix.rstrip(".") or "model", root)]


def default_scopes(model: nn.Module, granularity: str = "auto") -> Scopes:
    """The forward scopes of ``model``, found by structure (never by model name).

    ``"block"``: each of the model's repeated blocks (:func:`repeated_blocks`, at any depth of
    wrappers: ``DistributedDataParallel``, ``OffloadedModule``, a Hugging Face model's
    ``transformer``) and every other module along the way to them (embeddings, final norm,
    head). ``"layer"``: each block split into its children (a transformer block's norms,
    attention and MLP; without repeated blocks, every scope is split). ``"auto"``: ``"block"``
    with :data:`AUTO_MIN_BLOCKS` blocks or more, else ``"layer"``. Names are qualified names
    inside ``model``. A tensor saved outside every scope (in a block's own body, between its
    children) is kept.
    """
    if granularity not in GRANULARITIES:
        raise OffloadError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
    path = repeated_blocks(model)
    scopes = _top_level(model) if path is None else _along(model, "", path.split("."))
    if granularity == "auto":
        blocks = len(list(model.get_submodule(path).children())) if path else len(scopes)
        granularity = "block" if blocks >= AUTO_MIN_BLOCKS else "layer"
    if granularity == "layer":  # the blocks split (every scope, without repeated blocks)
        inside = "" if path is None else path + "."
        scopes = [
            (f"{name}.{n}", c) if n else (name, c)
            for name, module in scopes
            for n, c in (_children(module) if name.startswith(inside) else [("", module)])
        ]
    return scopes


def _children(module: nn.Module) -> list[tuple[str, nn.Module]]:
    return list(module.named_children()) or [("", module)]
