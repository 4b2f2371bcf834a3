"""A fake CUDA driver for :class:`hector.runtime.launch.Launcher`: records what it is asked.

Tests (in this process or in a subprocess that cannot import MLIR, see ``_no_mlir.py``) pass it
as ``Launcher(FakeDriver())`` to check module loading, argument packing and launch geometry
without a GPU. It imports nothing but the standard library.
"""

from __future__ import annotations

import ctypes
from typing import Any


class FakeDriver:
    """Records what the launcher asks of the CUDA driver and reads the packed parameters back."""

    def __init__(self, arch: str = "sm_90") -> None:
        self._arch = arch
        self.loaded: list[bytes] = []
        self.launches: list[dict[str, Any]] = []
        self.syncs = 0

    def arch(self) -> str:
        """The architecture it pretends to be."""
        return self._arch

    def load_module(self, ptx: bytes) -> Any:
        """Record the PTX; return a module handle."""
        self.loaded.append(ptx)
        return ("module", len(self.loaded))

    def get_function(self, module: Any, name: str) -> Any:
        """A function handle naming its module and entry."""
        return (module, name)

    def launch(
        self,
        function: Any,
        grid: tuple[int, int, int],
        block: tuple[int, int, int],
        params: Any,
        shared: int,
        stream: int,
    ) -> None:
        """Record one launch, with each parameter read now as a 64-bit integer under
        ``"values"`` (the packed cells are freed when the launch returns)."""
        self.launches.append(
            {
                "function": function,
                "grid": grid,
                "block": block,
                "values": read_u64(params, len(params)),
                "shared": shared,
                "stream": stream,
            }
        )

    def synchronize(self) -> None:
        """Count synchronizations."""
        self.syncs += 1


def read_u64(params: Any, n: int) -> list[int]:
    """Dereference the first ``n`` entries of a ``void**`` array as 64-bit integers."""
    return [ctypes.c_int64.from_address(params[i]).value for i in range(n)]
