"""Relations whose destination rows nothing reads, left out of a layer program's call.

A ``HeteroConv`` or ``to_hetero`` layer is one ``hector::pyg_layer`` call whose output holds
every node type's rows, split once per type (:func:`hector.dynamo.pyg_hetero._split`). A
model's last layer often feeds only some types to its loss (PyG's benchmark models and DBLP
example read the ``paper`` rows alone), yet the program would compute every relation: on an
ogbn-mag batch, the relations into ``author``, ``institution`` and ``field_of_study`` are a
quarter of the edges. Dynamo drops the unread pieces of the split from the captured graph, and
Inductor drops the per-relation convs that fed only them; one program cannot be cut so by
Dynamo, so :func:`prune` does it after the capture, before the graph first runs:

* a call whose only reader is its ``unsafe_split_with_sizes`` (through ``getitem`` nodes) has
  its *read* types: the pieces from which the graph's outputs or a side effect (an in-place
  method, an impure call) are computed (a piece may still feed ops whose results nothing
  reads, such as averaged heads' mean: Dynamo keeps those);
* the relations into any other type are dropped from the call: their ``edge_index`` from the
  graph list, their pair from ``ends``, their rows from each per-relation weight
  (:data:`PER_RELATION`: ``index_select`` of the stacked ``[R, ...]`` tensor, so the kept
  relations' gradients flow as before and the dropped ones get zeros, as the whole program
  gave a relation that fed no loss).

The read types' rows are unchanged (each relation's messages, degree norm and softmax are its
own); an unread type's rows become its bias (and root term) alone, which nothing reads.
Programs with per-edge inputs (``:edge``, ``hetero-gcn``'s coefficients) are left whole.
"""

from __future__ import annotations

import operator

import torch

#: The positions of the ``[R, ...]`` per-relation tensors of each program the pass cuts.
PER_RELATION: dict[str, tuple[int, ...]] = {
    "hetero-sage": (1,),
    "hetero-gat": (1, 2, 3),
    "hetero-gat:dst": (1, 2, 4),
}


def relation_rows(weight: torch.Tensor, keep: list[int]) -> torch.Tensor:
    """The rows ``keep`` of a stacked per-relation tensor."""
    return weight.index_select(0, torch.tensor(keep, device=weight.device))


def _family(program: str) -> str | None:
    """The :data:`PER_RELATION` key of ``program``, None for a program left whole."""
    kind, *rest = program.split(":")
    rest = [r for r in rest if r != "mean"]  # a relation's degree is its own: cut as the sum
    if kind == "hetero-sage":
        return kind
    if kind == "hetero-gat" and len(rest) == 1:
        return kind
    if kind == "hetero-gat" and rest[1:] == ["dst"]:
        return "hetero-gat:dst"
    return None


def _live(graph: torch.fx.Graph) -> set[torch.fx.Node]:
    """The nodes the graph's outputs or side effects (in-place methods, impure calls) read,
    directly or not."""
    roots = [
        n
        for n in graph.nodes
        if n.op == "output"
        or (n.op == "call_method" and str(n.target).endswith("_"))
        or (n.op != "placeholder" and n.is_impure())
    ]
    live: set[torch.fx.Node] = set()
    while roots:
        n = roots.pop()
        if n not in live:
            live.add(n)
            roots.extend(n.all_input_nodes)
    return live


def _read_pieces(node: torch.fx.Node, live: set[torch.fx.Node]) -> set[int] | None:
    """The indices of the output pieces that a ``live`` node reads, when the call's only
    reader is one ``unsafe_split_with_sizes`` read through ``getitem`` (else None)."""
    if len(node.users) != 1:
        return None
    (split,) = node.users
    name = split.target if split.op == "call_method" else getattr(split.target, "__name__", "")
    if "unsafe_split_with_sizes" not in str(name):
        return None
    read = set()
    for user in split.users:
        if user.target is not operator.getitem or not isinstance(user.args[1], int):
            return None
        if user in live:
            read.add(user.args[1])
    return read


def prune(gm: torch.fx.GraphModule) -> int:
    """Drop the unread relations of ``gm``'s ``hector::pyg_layer`` calls (module docstring);
    the number of calls cut."""
    targets = (torch.ops.hector.pyg_layer.default, torch.ops.hector.pyg_layer)
    done = 0
    live = _live(gm.graph)
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in targets:
            continue
        program, train, graph, sizes, ends, tensors = node.args
        family = _family(str(program))
        read = _read_pieces(node, live)
        if family is None or read is None or not isinstance(ends, list | tuple):
            continue
        keep = [r for r in range(len(graph)) if ends[2 * r + 1] in read]
        if not keep or len(keep) == len(graph):
            continue
        tensors = list(tensors)
        with gm.graph.inserting_before(node):
            for p in PER_RELATION[family]:
                tensors[p] = gm.graph.call_function(relation_rows, (tensors[p], keep))
        kept_ends = [e for r in keep for e in ends[2 * r : 2 * r + 2]]
        node.args = (program, train, [graph[r] for r in keep], sizes, kept_ends, tensors)
        done += 1
    if done:
        gm.recompile()
    return done
