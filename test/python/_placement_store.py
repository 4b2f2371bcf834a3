"""The private offload store the compiled-placement tests install (shared by
``test_placement_runtime.py`` and ``test_placement_faults.py``)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from hector.runtime.offload import TensorStore
from hector.runtime.placement import use_store


@pytest.fixture(name="store")
def placement_store(tmp_path: Any) -> Iterator[TensorStore]:
    """A private store for the test's frames (closed and restored afterwards)."""
    s = TensorStore(str(tmp_path), threads=2, chunk_bytes=1 << 16)
    previous = use_store(s)
    try:
        yield s
    finally:
        use_store(previous)
        s.close()
