"""The one figure standard of the experiments and benchmarks: style, layout helpers, and a checked save.

Every figure is made by :func:`figure` and written by :func:`save_figure`, which refuses a figure that
breaks the standard (so a test that runs every experiment's ``figures`` checks every figure):

* **Size.** Figures are at most :data:`TEXT_WIDTH_IN` inches wide (the site's text column, about
  700 px at 100 px per inch), so a figure is shown at (or near) 1:1 and its :data:`STYLE` fonts
  (>= :data:`MIN_FONT_PT` pt) are readable there; saved at :data:`DPI` for sharpness.
* **Labels.** Every axes that holds data has an x and a y label (a shared axis may carry it on one
  sibling); units go in brackets (:func:`label`).
* **Legends outside the data.** A legend may not overlap any axes (:func:`legend_outside` puts it to
  the right of or below the panels).
* **Scale from counted points only.** :func:`scale_from` picks linear, log or symlog from the values
  that count and sets the limits from them; :func:`draw_apart` draws the points that do not count
  (uncertified, no window, controls) hollow and grey in their own legend entry, at the edge of the axes
  (a triangle pointing off-scale) when they fall outside the counted range, so they never set the scale.
* **The deciding quantity on the figure.** :func:`threshold` draws a labelled reference line.
* Every saved PNG carries :data:`STAMP` in its ``Software`` text chunk (the test checks it).
"""

from __future__ import annotations

import math
import pathlib

import numpy as np

TEXT_WIDTH_IN = 7.0
DPI = 150
MIN_FONT_PT = 7.5
STAMP = "ssl_geometry experiments.plotting standard 1"
APART_COLOUR = "0.55"
#: Distinct colour/marker cycles (Okabe-Ito colours, colour-blind safe) for series on one axes.
COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
STYLE = {
    "font.size": 9,
    "axes.titlesize": 9,
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "legend.title_fontsize": 8,
    "figure.titlesize": 10,
    "lines.linewidth": 1.4,
    "lines.markersize": 5,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.5,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.frameon": False,
    "axes.prop_cycle": None,  # set in pyplot() from COLOURS
    "savefig.dpi": DPI,
    "figure.dpi": 100,
}


def pyplot():
    """``matplotlib.pyplot`` on the Agg backend with :data:`STYLE` applied (once, for every figure)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from cycler import cycler

    plt.rcParams.update({**STYLE, "axes.prop_cycle": cycler(color=COLOURS)})
    return plt


def figure(nrows: int = 1, ncols: int = 1, *, height: float = 3.0, width: float = TEXT_WIDTH_IN, mosaic=None, **kw):
    """``(fig, axes)`` in the standard style: ``width`` inches (at most :data:`TEXT_WIDTH_IN`), constrained
    layout, ``axes`` always a 2-D array (``squeeze=False``); with ``mosaic`` (``plt.subplot_mosaic``'s
    layout), ``axes`` is its ``{name: Axes}`` dict. ``kw`` goes to ``plt.subplots`` / ``subplot_mosaic``."""
    if not 0 < width <= TEXT_WIDTH_IN:
        raise ValueError(f"`width` must be in (0, {TEXT_WIDTH_IN}] inches (the site's text column); got {width}.")
    if height <= 0:
        raise ValueError(f"`height` must be positive; got {height}.")
    plt = pyplot()
    if mosaic is not None:
        fig, axes = plt.subplot_mosaic(mosaic, figsize=(width, height), layout="constrained", **kw)
    else:
        fig, axes = plt.subplots(nrows, ncols, figsize=(width, height), squeeze=False, layout="constrained", **kw)
    fig._ssl_standard = True
    return fig, axes


def label(name: str, unit: str | None = None) -> str:
    """An axis label ``"name [unit]"`` (``unit=None``: a dimensionless quantity, ``"name"``)."""
    return f"{name} [{unit}]" if unit else name


def series_style(i: int) -> dict:
    """Colour and marker of the ``i``-th series on an axes (distinct for the first 8, then cycling)."""
    return {"color": COLOURS[i % len(COLOURS)], "marker": MARKERS[i % len(MARKERS)]}


def legend_outside(where, *, loc: str = "right", ncol: int = 1, title: str | None = None, handles=None, labels=None):
    """A legend outside the data: for an ``Axes``, right of it (``loc="right"``) or below the figure's panels
    (``"below"``, a figure legend of that axes' entries); for a ``Figure``, right of / below all panels
    (constrained layout makes room). Returns the legend."""
    if loc not in ("right", "below"):
        raise ValueError(f"`loc` must be 'right' or 'below'; got {loc!r}.")
    kw = {"ncol": ncol, "title": title}
    if handles is not None:
        kw.update(handles=handles, labels=labels if labels is not None else [h.get_label() for h in handles])
    if hasattr(where, "get_axes"):  # a Figure
        return where.legend(loc="outside right upper" if loc == "right" else "outside lower center", **kw)
    if loc == "right":
        return where.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, **kw)
    if handles is None:  # below an axes: a figure legend under all panels (constrained layout makes room)
        handles, labels = where.get_legend_handles_labels()
        kw.update(handles=handles, labels=labels)
    return where.figure.legend(loc="outside lower center", **kw)


def loss_shape(values, window: int = 25, floor: float = 1e-4):
    """``(steps, y)`` of a loss curve for comparing shapes on a log axis: the running mean over ``window``
    steps ``m``, then ``y = (m - min m) / (max m - min m) + floor`` (``steps`` centres the windows)."""
    v = np.asarray(values, float)
    if v.ndim != 1 or v.size == 0:
        raise ValueError(f"`values` must be a non-empty 1-D curve; got shape {v.shape}.")
    w = max(1, min(int(window), v.size))
    mean = np.convolve(v, np.ones(w) / w, mode="valid")
    return np.arange(mean.size) + (w - 1) / 2, (mean - mean.min()) / max(mean.max() - mean.min(), 1e-300) + floor


def choose_scale(values, *, decades: float = 2.0) -> tuple[str, float | None]:
    """``(scale, linthresh)`` for finite ``values``: ``"log"`` when all are > 0 and span more than ``decades``
    decades; ``"symlog"`` when signs mix (or zeros occur) and the nonzero magnitudes span more than
    ``decades`` decades (``linthresh`` = the smallest nonzero magnitude, rounded down to a power of 10);
    else ``"linear"``."""
    v = np.asarray([x for x in np.ravel(np.asarray(values, float)) if np.isfinite(x)])
    nz = np.abs(v[v != 0])
    if v.size == 0 or nz.size == 0:
        return "linear", None
    span = math.log10(nz.max() / nz.min())
    if span <= decades:
        return "linear", None
    if np.all(v > 0):
        return "log", None
    return "symlog", 10.0 ** math.floor(math.log10(nz.min()))


def scale_from(
    ax, values, *, axis: str = "y", decades: float = 2.0, pad: float = 0.08, linthresh: float | None = None
) -> str:
    """Set ``axis`` of ``ax`` to the scale :func:`choose_scale` picks for the *counted* ``values`` and the
    limits to their range (padded by ``pad`` of it, in the scale's own coordinates); returns the scale.
    ``linthresh`` (> 0) replaces the symlog linear range (e.g. a tolerance below which values count as 0)."""
    if linthresh is not None and not linthresh > 0:
        raise ValueError(f"`linthresh` must be positive; got {linthresh}.")
    if axis not in ("x", "y"):
        raise ValueError(f"`axis` must be 'x' or 'y'; got {axis!r}.")
    v = np.asarray([x for x in np.ravel(np.asarray(values, float)) if np.isfinite(x)])
    scale, lt = choose_scale(v, decades=decades)
    if scale == "symlog" and linthresh is not None:
        lt = linthresh
    setter = ax.set_yscale if axis == "y" else ax.set_xscale
    setter(scale, **({"linthresh": lt} if scale == "symlog" else {}))
    if v.size:
        fwd = {"linear": lambda x: x, "log": np.log10, "symlog": lambda x: np.sign(x) * np.log10(1 + np.abs(x) / lt)}[
            scale
        ]
        inv = {
            "linear": lambda x: x,
            "log": lambda x: 10.0**x,
            "symlog": lambda x: np.sign(x) * lt * (10.0 ** np.abs(x) - 1),
        }[scale]
        lo, hi = fwd(v.min()), fwd(v.max())
        p = pad * (hi - lo) if hi > lo else (0.5 if scale != "linear" else max(abs(lo) * 0.1, 1e-12))
        (ax.set_ylim if axis == "y" else ax.set_xlim)(inv(lo - p), inv(hi + p))
    return scale


def tidy_log_ticks(ax) -> None:
    """On each log axis of ``ax``, by the decades it spans: < 1, majors at 1, 1.5, 2, 3, 5, 7 x 10^k; 1 to 2,
    at 1, 2, 5 x 10^k (both labelled ``%g``); more, at powers of 10 (matplotlib's labels). Minor ticks are
    never labelled (matplotlib labels those of a short log axis, and they collide)."""
    from matplotlib.ticker import FormatStrFormatter, LogLocator, NullFormatter

    for axis, scale, lim in ((ax.xaxis, ax.get_xscale(), ax.get_xlim()), (ax.yaxis, ax.get_yscale(), ax.get_ylim())):
        if scale != "log":
            continue
        span = math.log10(max(lim) / min(lim))
        if span < 2:
            axis.set_major_locator(
                LogLocator(base=10, subs=(1.0, 1.5, 2.0, 3.0, 5.0, 7.0) if span < 1 else (1.0, 2.0, 5.0))
            )
            axis.set_major_formatter(FormatStrFormatter("%g"))
        axis.set_minor_formatter(NullFormatter())


def draw_apart(ax, x, y, *, label: str, marker: str = "o", size: float = 22):
    """Draw points that are not counted hollow and grey, in their own legend entry ``label``, after the
    counted data has set the limits: points inside the y-limits at their value, points outside at the edge
    as a triangle pointing off-scale (so they never set the scale). Returns the number drawn."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.shape != y.shape:
        raise ValueError(f"`x` and `y` must have one shape; got {x.shape} and {y.shape}.")
    if not x.size:
        return 0
    lo, hi = ax.get_ylim()
    ax.autoscale(False, axis="y")
    kw = {"facecolors": "none", "edgecolors": APART_COLOUR, "s": size, "linewidths": 1.0, "clip_on": False, "zorder": 1}
    inside = np.isfinite(y) & (y >= lo) & (y <= hi)
    parts = [
        (inside, y, marker),
        (~inside & (y > hi), np.full_like(y, hi), "^"),
        (~inside & ~(y > hi), np.full_like(y, lo), "v"),
    ]
    if not inside.all():
        label = f"{label}; \u25b2\u25bc: off scale"
    first = True
    for mask, yy, mk in parts:
        if mask.any():
            ax.scatter(x[mask], yy[mask], marker=mk, label=label if first else None, **kw)
            first = False
    return int(x.size)


def threshold(ax, value: float, text: str, *, axis: str = "y", color: str = "k", ls: str = "--", at: float = 0.99):
    """A labelled reference line at ``value`` (the quantity or threshold that decides a claim): horizontal
    for ``axis="y"``, vertical for ``"x"``; the label sits on the line, inside the axes, at axes fraction
    ``at`` along it (right-aligned when ``at > 0.5``)."""
    if axis == "y":
        line = ax.axhline(value, color=color, ls=ls, lw=1.0, zorder=0.5)
        ax.annotate(
            text,
            xy=(at, value),
            xycoords=("axes fraction", "data"),
            ha="right" if at > 0.5 else "left",
            va="bottom",
            fontsize=8,
            color=color,
        )
    elif axis == "x":
        line = ax.axvline(value, color=color, ls=ls, lw=1.0, zorder=0.5)
        ax.annotate(
            text,
            xy=(value, 0.98),
            xycoords=("data", "axes fraction"),
            ha="left",
            va="top",
            fontsize=8,
            color=color,
            rotation=90,
        )
    else:
        raise ValueError(f"`axis` must be 'x' or 'y'; got {axis!r}.")
    return line


def _has_data(ax) -> bool:
    return bool(ax.lines or ax.collections or ax.patches or ax.images)


def _labelled(ax, which: str) -> bool:
    """``ax`` has its ``which`` label, or a sibling sharing that axis has it, or (``ax`` not a twin) another
    panel of its grid row (y) / column (x) has it: small multiples name their quantity once per row/column."""
    get = (lambda a: a.get_xlabel()) if which == "x" else (lambda a: a.get_ylabel())
    shared = ax.get_shared_x_axes() if which == "x" else ax.get_shared_y_axes()
    if any(get(a).strip() for a in shared.get_siblings(ax)):
        return True
    spec = ax.get_subplotspec()
    others = [a for a in ax.figure.get_axes() if a is not ax and a.get_subplotspec() is not None]
    if spec is None or any(a.get_subplotspec() == spec for a in others):  # twins carry their own label
        return False
    span = (lambda sp: sp.rowspan) if which == "y" else (lambda sp: sp.colspan)
    return any(span(a.get_subplotspec()) == span(spec) and get(a).strip() for a in others)


def check(fig) -> list[str]:
    """The ways ``fig`` breaks the standard (empty when it meets it); draws the figure to measure it."""
    problems = []
    if not getattr(fig, "_ssl_standard", False):
        problems.append("not made by experiments.plotting.figure")
    w = fig.get_figwidth()
    if w > TEXT_WIDTH_IN + 1e-9:
        problems.append(f"figure {w:.2f} in wide > {TEXT_WIDTH_IN} in")
    fig.canvas.draw()
    data_axes = [a for a in fig.get_axes() if a.get_visible() and _has_data(a)]
    for a in data_axes:
        for which in ("x", "y"):
            if not _labelled(a, which):
                problems.append(f"axes {a.get_title()!r}: no {which} label")
    legends = [leg for a in fig.get_axes() if (leg := a.get_legend()) is not None] + list(fig.legends)
    for leg in legends:
        lb = leg.get_window_extent()
        for a in data_axes:
            ab = a.get_window_extent()
            ox = min(lb.x1, ab.x1) - max(lb.x0, ab.x0)
            oy = min(lb.y1, ab.y1) - max(lb.y0, ab.y0)
            if ox > 2 and oy > 2:
                problems.append(f"a legend covers axes {a.get_title()!r}")
    for t in fig.findobj(lambda o: hasattr(o, "get_fontsize") and hasattr(o, "get_text")):
        if t.get_visible() and t.get_text().strip() and t.get_fontsize() < MIN_FONT_PT - 1e-9:
            problems.append(f"text {t.get_text()[:30]!r} at {t.get_fontsize():.1f} pt < {MIN_FONT_PT} pt")
    return problems


def save_figure(fig, out_dir, name: str) -> pathlib.Path:
    """Check ``fig`` against the standard (:func:`check`; ``ValueError`` listing the problems), write
    ``out_dir/name.png`` at :data:`DPI` with :data:`STAMP` in its metadata, close it; returns the path."""
    plt = pyplot()
    problems = check(fig)
    if problems:
        plt.close(fig)
        raise ValueError(f"figure {name!r} breaks the figure standard: " + "; ".join(dict.fromkeys(problems)))
    out = pathlib.Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.png"
    fig.savefig(path, dpi=DPI, metadata={"Software": STAMP})
    plt.close(fig)
    return path


def stamp_of(path) -> str | None:
    """The ``Software`` text chunk of the PNG at ``path`` (``STAMP`` when :func:`save_figure` wrote it)."""
    from PIL import Image

    with Image.open(path) as im:
        return im.info.get("Software")
