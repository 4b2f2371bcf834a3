"""Shared pytest setup.

An offloading cache's default (``release_memory="auto"``) installs Hector's caching CPU
allocator for the whole process, which would make every later test in this interpreter run
under it, and the ``"advise"`` tests test something else depending on their order. The suite's
own process therefore keeps PyTorch's allocator; the tests of the default install it in a fresh
interpreter with this variable removed (``test_cpu_allocator.py``).

Compiled programs go to a persistent cache private to this run (``HECTOR_CACHE_DIR``, removed
at exit), shared with the processes tests start: the suite never writes to the user's cache.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile

os.environ["HECTOR_CPU_ALLOCATOR"] = "pytorch"
if "HECTOR_CACHE_DIR" not in os.environ:
    os.environ["HECTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="hector-test-cache-")
    atexit.register(shutil.rmtree, os.environ["HECTOR_CACHE_DIR"], ignore_errors=True)
