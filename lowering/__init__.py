"""Conversions between levels, the named pipelines and the back ends (CPU JIT, PTX).

Importing this package registers every pass, conversion and named pipeline, through the one
table of pass modules (:func:`hector.passes._registry.load_all`).
"""

from ..passes._registry import load_all

load_all()
