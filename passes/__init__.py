"""Hector's passes on its own dialects; importing this package registers each of them."""

from . import (  # importing each module registers its passes
    aggregate_order,  # noqa: F401  (registers hector-aggregation-order)
    autodiff,  # noqa: F401  (registers hector-autodiff)
    compact,  # noqa: F401  (hector-compact-materialization)
    fuse,  # noqa: F401  (hector-fuse, hector-dce-cse)
    infer_unified,  # noqa: F401  (placement-infer-unified)
    linear_reorder,  # noqa: F401  (hector-linear-reorder)
    plan_offload,  # noqa: F401  (placement-plan-offload)
    plan_saved,  # noqa: F401  (placement-plan-saved)
    verify,  # noqa: F401  (hector-verify)
)
from ._registry import PASSES, PIPELINES, Option, PassFailure, register_pass, register_pipeline

__all__ = ["PASSES", "PIPELINES", "Option", "PassFailure", "register_pass", "register_pipeline"]
