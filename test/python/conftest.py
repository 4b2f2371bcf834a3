"""Shared pytest setup.

An offloading cache's default (``release_memory="auto"``) installs Hector's caching CPU
allocator for the whole process, which would make every later test in this interpreter run
under it, and the ``"advise"`` tests test something else depending on their order. The suite's
own process therefore keeps PyTorch's allocator; the tests of the default install it in a fresh
interpreter with this variable removed (``test_cpu_allocator.py``).
"""

from __future__ import annotations

import os

os.environ["HECTOR_CPU_ALLOCATOR"] = "pytorch"
