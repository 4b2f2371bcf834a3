"""The front ends that turn a user's program into ``hector_inter``.

:mod:`~hector.frontends.compiled` is ``@hector.compile``: a forward function written against the
graph API (:mod:`~hector.frontends.graph_api`), traced into ``hector_inter`` through the MLIR
bindings (:mod:`~hector.frontends.trace`), compiled per graph schema and shapes and run on torch
tensors. :mod:`~hector.frontends.importer` is ``hector.import_model``: an ``nn.Module``
imported through torch-mlir and raised to Hector's ops where a relational pattern is recognised
(with :mod:`~hector.frontends.import_ops` for the torch-level ops,
:mod:`~hector.frontends.import_plan` for the cut into compiled units and
:mod:`~hector.frontends.import_segments` for the units themselves).
:mod:`~hector.frontends.graph_cache` caches the graphs built from PyG index tensors by their
content, for the importer and the Dynamo backend (:mod:`hector.dynamo`). Nothing here imports a
back end: programs go to :mod:`hector.targets.driver` and the targets.
"""
