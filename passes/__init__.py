"""Hector's passes on its own dialects, and the registry they and the conversions share.

Importing this package registers nothing by itself: each pass registers where it is defined,
the pipeline parser imports the module of each name a pipeline holds (``load``), and
:func:`load_all` (``passes/registry.py``) imports every module that defines one.
"""

from .registry import (
    PASSES,
    PIPELINES,
    Option,
    PassFailure,
    load_all,
    register_pass,
    register_pipeline,
)

__all__ = [
    "PASSES",
    "PIPELINES",
    "Option",
    "PassFailure",
    "load_all",
    "register_pass",
    "register_pipeline",
]
