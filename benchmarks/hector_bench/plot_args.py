"""The ``--plot PATH`` argument type of the benchmarks: an image file matplotlib can write."""

from __future__ import annotations

import argparse
import importlib.util
import os

__all__ = ["PLOT", "PlotPath", "plot_formats"]


def plot_formats() -> frozenset[str]:
    """File extensions matplotlib can save a figure as (``png``, ``svg``, ``pdf``, ...)."""
    try:
        from matplotlib.backend_bases import FigureCanvasBase

        return frozenset(FigureCanvasBase.get_supported_filetypes())
    except ImportError:  # a broken matplotlib install: the formats it usually has
        return frozenset(("eps", "jpeg", "jpg", "pdf", "pgf", "png", "ps", "raw", "rgba", "svg"))


class PlotPath:
    """An image file matplotlib can write: a supported extension and an existing folder."""

    def __init__(self) -> None:
        """Accept paths ``<existing folder>/<name>.<png|svg|pdf|...>``."""
        self.__name__ = "plot path"

    def describe(self) -> str:
        """What is accepted, for ``--help``."""
        return "an image path whose folder exists, ending .png, .svg, .pdf, ..."

    def __call__(self, text: str) -> str:
        """``text``; ``ArgumentTypeError`` for an unknown format or a missing folder."""
        if not text or "\0" in text:
            raise argparse.ArgumentTypeError(f"not a file name: {text!r}")
        if importlib.util.find_spec("matplotlib") is None:
            raise argparse.ArgumentTypeError(
                "plots need matplotlib, which the [bench] extra installs "
                "(pip install -e '.[bench]')"
            )
        ext = os.path.splitext(text)[1].lstrip(".").lower()
        formats = plot_formats()
        if ext not in formats:
            raise argparse.ArgumentTypeError(
                f"cannot save a plot as {ext or 'a file without an extension'!r} ({text}); "
                f"use one of: {', '.join(sorted(formats))}"
            )
        folder = os.path.dirname(text) or "."
        if not os.path.isdir(folder):
            raise argparse.ArgumentTypeError(f"folder '{folder}' does not exist ({text})")
        if os.path.isdir(text):
            raise argparse.ArgumentTypeError(f"'{text}' is a folder, not an image file name")
        return text


#: The shared instance every ``--plot`` option uses.
PLOT = PlotPath()
