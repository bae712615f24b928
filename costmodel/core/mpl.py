"""matplotlib on its file-only backend (Agg, no display), with the figures' font sizes: every module that draws
takes pyplot from here."""

from __future__ import annotations


def pyplot():
    """matplotlib.pyplot on the Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # svg.hashsalt: an SVG's clip-path ids from a fixed salt, so the same figure writes the same bytes;
    # text.parse_math off: a name with dollar signs (a config's, a profile's) is drawn as written, not as TeX
    plt.rcParams.update(
        {"font.size": 9, "axes.titlesize": 10, "figure.dpi": 110, "svg.hashsalt": "costmodel", "text.parse_math": False}
    )
    return plt
