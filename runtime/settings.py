"""Errors in Hector's environment settings.

Hector reads a few environment variables (``HECTOR_POOL_SPIN_US``, ``HECTOR_MEMORY_LIMIT``,
``HECTOR_GPU_CHIP``, ...) where they take effect. A value it cannot use raises
:class:`SettingError`, whose message names the variable, what it wants and what it got; the
``hector`` command prints that message as one ``error:`` line and exits with status 1, as it
does for a bad command-line argument.
"""

from __future__ import annotations

__all__ = ["SettingError"]


class SettingError(ValueError):
    """An environment variable holds a value Hector cannot use (the message names it)."""
