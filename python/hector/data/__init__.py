"""Graphs and the data that feeds them: everything a compiled program runs on.

:mod:`~hector.data.graph` holds :class:`~hector.data.graph.HeteroGraph` (``hector.HeteroGraph``),
with its compaction maps (:mod:`~hector.data.compaction`), the validator of edge-index input
every graph builder shares (:mod:`~hector.data.edge_index`) and the limits of ids and memory
checked before anything is allocated (:mod:`~hector.data.limits`);
:mod:`~hector.data.dataset` the :class:`~hector.data.dataset.Dataset` every loader returns, read
from files (:mod:`~hector.data.files`), tensors (:mod:`~hector.data.tensors`) and IGBH folders
(:mod:`~hector.data.igbh`), or generated (:mod:`~hector.data.synthetic`, shaped after the graphs
of :mod:`~hector.data.published`) — the public entry point is :mod:`hector.datasets`.
:mod:`~hector.data.loader` samples mini-batches (:mod:`~hector.data.batch`) and reads their features
from out-of-core stores (:mod:`~hector.data.feature_store`; :mod:`~hector.data.typed_features` for
one file per node type, :mod:`~hector.data.unified_features` for pinned memory the GPU gathers
from); :mod:`~hector.data.unified` makes the pinned host tensors GPU kernels read zero-copy
(``hector.unified``). This package needs no compiler: it imports only the runtime layer.
"""
