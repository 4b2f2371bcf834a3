"""A small typed graph (papers and authors, three relations) for the CUDA target's model tests:
Hector's graph, PyG's ``edge_index_dict`` and features, on one device."""

from __future__ import annotations

import random

import torch

import hector

META = (
    ["paper", "author"],
    [("paper", "cites", "paper"), ("author", "writes", "paper"), ("paper", "written_by", "author")],
)
COUNTS = {"paper": 40, "author": 30}


def hetero(device: str = "cuda") -> tuple[hector.HeteroGraph, dict, dict]:
    """A typed graph numbered by node type, PyG's edge_index_dict and features on ``device``."""
    rnd = random.Random(3)
    offset = {"paper": 0, "author": COUNTS["paper"]}
    src, dst, typ, eid = [], [], [], {}
    for r, (s, _, d) in enumerate(META[1]):
        pairs = [(rnd.randrange(COUNTS[s]), rnd.randrange(COUNTS[d])) for _ in range(120)]
        eid[META[1][r]] = torch.tensor(pairs).t().to(device)
        for u, v in pairs:
            src.append(u + offset[s])
            dst.append(v + offset[d])
            typ.append(r)
    ntype = torch.tensor([0] * COUNTS["paper"] + [1] * COUNTS["author"])
    graph = hector.HeteroGraph.from_edge_index(
        torch.tensor([src, dst]), torch.tensor(typ), node_type=ntype, num_etypes=len(META[1])
    )
    x = {k: torch.randn(n, 8, device=device) for k, n in COUNTS.items()}
    return graph, eid, x
