"""The published graphs Hector replicates: node, edge, relation and node type counts.

``load("synthetic:<name>")`` (:mod:`hector.data.synthetic`) generates a graph of these sizes
for every name in :data:`SYNTHETIC_SPECS`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["SYNTHETIC_SPECS", "SyntheticSpec"]


@dataclass(frozen=True)
class SyntheticSpec:
    """Published size of a graph that ``synthetic:<name>`` replicates.

    ``edges`` and ``relations`` are the published counts *before* inverse edges; the replica
    adds one inverse relation per relation (doubling both). ``node_types`` is the number of node
    types (names generated unless ``type_names`` is given); ``relation_names`` and
    ``relation_ends`` pin a real schema where there is a small one (mag, IGBH); their fractions
    may be given as counts (they are normalised).
    """

    nodes: int
    edges: int
    relations: int
    node_types: int
    source: str
    type_names: tuple[str, ...] = ()
    type_fractions: tuple[float, ...] = ()
    relation_names: tuple[str, ...] = ()
    relation_ends: tuple[tuple[int, int], ...] = ()
    relation_fractions: tuple[float, ...] = ()
    #: Per relation, the (source, destination) power of the skewed endpoint draws (rank
    #: ``floor(n u^p)``: 1 is uniform, larger is more skewed); empty: (3.0, 1.6) for every
    #: relation, a few hub sources as in RDF graphs.
    relation_skew: tuple[tuple[float, float], ...] = ()


#: Replicated graphs: the published node, edge and relation counts of each dataset (the RDF
#: graphs as DGL's ``AIFBDataset``/``MUTAGDataset``/``BGSDataset``/``AMDataset`` ship them for
#: the RGCN paper's entity classification; FB15k-237, ogbl-biokg, ogbn-mag and ogbl-wikikg2 as
#: their dataset papers and OGB publish them); node type counts from DGL's heterogeneous
#: versions of the RDF graphs: AIFB 7, MUTAG 5, BGS 27, AM 7.
SYNTHETIC_SPECS: dict[str, SyntheticSpec] = {
    "aifb": SyntheticSpec(8_285, 29_043, 45, 7, "RDF (AIFB)"),
    "mutag": SyntheticSpec(23_644, 74_227, 23, 5, "RDF (MUTAG)"),
    "bgs": SyntheticSpec(333_845, 916_199, 103, 27, "RDF (BGS)"),
    "am": SyntheticSpec(1_666_764, 5_988_321, 133, 7, "RDF (AM)"),
    "fb15k": SyntheticSpec(14_541, 310_116, 237, 1, "knowledge graph (FB15k-237)"),
    "biokg": SyntheticSpec(
        93_773,
        5_088_434,
        51,
        5,
        "knowledge graph (ogbl-biokg)",
        type_names=("disease", "drug", "function", "protein", "sideeffect"),
        type_fractions=(0.11, 0.11, 0.48, 0.19, 0.11),
    ),
    "mag": SyntheticSpec(
        1_939_743,
        21_111_007,
        4,
        4,
        "ogbn-mag",
        type_names=("paper", "author", "institution", "field_of_study"),
        type_fractions=(0.3796, 0.5849, 0.0045, 0.0310),
        relation_names=("cites", "writes", "affiliated_with", "has_topic"),
        relation_ends=((0, 0), (1, 0), (1, 2), (0, 3)),
        relation_fractions=(0.2566, 0.3385, 0.0494, 0.3555),
    ),
    "wikikg2": SyntheticSpec(2_500_604, 17_137_181, 535, 1, "knowledge graph (ogbl-wikikg2)"),
    # Not a published graph: the shape of a knowledge graph with very many relation types, most
    # of them rare (Zipf shares), where per-relation weights and loops dominate.
    "kg2000": SyntheticSpec(
        20_000, 300_000, 2_000, 1, "knowledge graph shape: 2,000 Zipf-distributed relations"
    ),
}


# IGBH (Illinois Graph Benchmark, heterogeneous; Khatua et al., KDD 2023), the graph of MLPerf
# Training's R-GAT: per-type node counts and per-relation edge counts of each published size.
# The skews are chosen, not measured: a paper cites and is written by a handful (mild source
# skew), while cited papers, prolific authors, popular topics and large institutes collect
# many edges (steep destination skew).
_IGBH_TYPES = ("paper", "author", "institute", "fos")
_IGBH_RELATIONS = ("cites", "written_by", "topic", "affiliated_to")
_IGBH_ENDS = ((0, 0), (0, 1), (0, 3), (1, 2))
_IGBH_SKEW = ((1.3, 2.5), (1.2, 2.0), (1.2, 3.0), (1.2, 3.0))
_IGBH_SIZES = {  # (paper, author, institute, fos), (cites, written_by, topic, affiliated_to)
    "tiny": ((100_000, 357_041, 8_738, 84_220), (447_416, 471_443, 718_445, 325_410)),
    "small": (
        (1_000_000, 1_926_066, 14_751, 190_449),
        (12_070_502, 4_553_516, 7_234_122, 1_630_476),
    ),
    "medium": (
        (10_000_000, 15_544_654, 23_256, 415_054),
        (120_077_694, 39_854_592, 68_510_495, 11_049_412),
    ),
}
for _size, (_nodes, _edges) in _IGBH_SIZES.items():
    SYNTHETIC_SPECS[f"igbh-{_size}"] = SyntheticSpec(
        sum(_nodes),
        sum(_edges),
        4,
        4,
        f"IGBH-{_size} (MLPerf R-GAT)",
        type_names=_IGBH_TYPES,
        type_fractions=tuple(float(n) for n in _nodes),
        relation_names=_IGBH_RELATIONS,
        relation_ends=_IGBH_ENDS,
        relation_fractions=tuple(float(e) for e in _edges),
        relation_skew=_IGBH_SKEW,
    )
