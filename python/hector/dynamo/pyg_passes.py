"""The rewrites of a captured graph's ``hector::pyg_layer`` calls, before the graph first runs."""

from __future__ import annotations

import torch

from . import pyg_direct, pyg_inputs, pyg_unread


def rewrite(gm: torch.fx.GraphModule) -> None:
    """The layers' rows read as stored, without a ``cat`` where they need none
    (:func:`hector.dynamo.pyg_inputs.fold`), the relations into rows nothing reads left out
    (:func:`hector.dynamo.pyg_unread.prune`), then each layer op called directly
    (:func:`hector.dynamo.pyg_direct.direct_calls`)."""
    pyg_inputs.fold(gm)
    pyg_unread.prune(gm)
    pyg_direct.direct_calls(gm)
