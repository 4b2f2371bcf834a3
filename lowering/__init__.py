"""Conversions between levels, the named pipelines and the back ends (CPU JIT, PTX).

Importing this package registers every pass, conversion and named pipeline, through the one
table of pass modules (:func:`hector.passes.registry.load_all`).
"""

from ..passes.registry import load_all

load_all()
