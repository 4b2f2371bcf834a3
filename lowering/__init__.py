"""Conversions between levels, the named pipelines and the back ends (CPU JIT, PTX).

Importing this package registers every conversion and named pipeline, and every pass below.
"""

from .. import passes  # noqa: F401  (registers the passes the pipelines name)
from . import inter_to_intra, intra_to_gpu, intra_to_scf, pipelines, schedule  # noqa: F401
