"""Hector's passes on its own dialects; importing this package registers each of them."""

from . import verify  # noqa: F401  (registers hector-verify)
from ._registry import PASSES, PIPELINES, Option, PassFailure, register_pass, register_pipeline

__all__ = ["PASSES", "PIPELINES", "Option", "PassFailure", "register_pass", "register_pipeline"]
