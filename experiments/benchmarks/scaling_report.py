"""The scaling benchmark's analysis, from its tables only: fitted exponents, crossings, figures and the markdown
report (and reading a report back). Re-exported by ``experiments.bench_scaling``, which measures the tables.
"""

from __future__ import annotations

import math
import os
import pathlib

import numpy as np

from experiments.common import markdown_table

__all__ = ["FIGURE_SPECS", "crossing", "exponents", "figures", "fit_exponent", "report", "tables_from_markdown"]


def fit_exponent(x, y) -> float:
    """Least-squares slope ``p`` of ``log y = p log x + c`` (``nan`` with fewer than 2 distinct ``x``)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = (x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y)
    if len(np.unique(x[ok])) < 2:
        return math.nan
    return float(np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)[0])


def crossing(x, y_a, y_b) -> float:
    """First ``x`` where ``y_a - y_b`` changes sign, by log-log linear interpolation (``nan`` if none)."""
    x, d = np.asarray(x, float), np.log(np.asarray(y_a, float)) - np.log(np.asarray(y_b, float))
    for i in range(len(x) - 1):
        if d[i] == 0:
            return float(x[i])
        if d[i] * d[i + 1] < 0:
            lx = np.log(x[i]) + (np.log(x[i + 1]) - np.log(x[i])) * d[i] / (d[i] - d[i + 1])
            return float(np.exp(lx))
    return math.nan


#: Per table, its panels: (y key, y label with unit, x key, x label, [series]); series ``None`` = all rows.
FIGURE_SPECS = {
    "lanczos": [
        ("wall_s", "wall time [s]", "n*d", "problem size n d (batch x dim)", ["vary n", "vary d"]),
        ("hvps", "Hessian-vector products [count]", "n*d", "problem size n d (batch x dim)", ["vary n", "vary d"]),
    ],
    "dense": [(("dense_s", "matrix_free_s"), "wall time [s]", "P", "dimension P = n d", [None])],
    "train": [("s_per_step", "time per training step [s]", "batch", "batch size [images]", [None])],
    "flow": [
        ("grad_evals", "gradient evaluations [count]", "t1", "horizon t1 (stiffness 1)", ["vary t1"]),
        ("grad_evals", "gradient evaluations [count]", "stiffness", "stiffness factor s (t1 = 5)", ["vary s"]),
    ],
}
_TITLES = {
    "lanczos": "blockwise Lanczos on the SimSiam head",
    "dense": "dense spectrum vs matrix-free",
    "train": "SimSiam ResNet-18 training step",
    "flow": "gradient flow (Tsit5, rtol 1e-6)",
}


def figures(tables: dict, out_dir: pathlib.Path) -> list[pathlib.Path]:
    """One log-log figure per table (:data:`FIGURE_SPECS`: a panel per measured quantity, y labels with units),
    the fitted exponent p of ``y ~ x^p`` in each series' legend entry; returns the written paths."""
    from experiments import plotting as pl

    paths = []
    for name, rows in tables.items():
        if not rows:
            continue
        specs = FIGURE_SPECS[name]
        fig, axes = pl.figure(1, len(specs), height=3.4, width=pl.TEXT_WIDTH_IN if len(specs) > 1 else 4.6)
        k = 0
        for ax, (yks, ylabel, xk, xlabel, series) in zip(axes[0], specs):
            for yk in yks if isinstance(yks, tuple) else (yks,):
                for ser in series:
                    sel = [r for r in rows if ser is None or r.get("series") == ser]
                    x, y = [r[xk] for r in sel], [r[yk] for r in sel]
                    what = ", ".join(w for w in (ylabel.split(" [")[0] if len(specs) > 1 else yk, ser) if w)
                    ax.loglog(x, y, "-", **pl.series_style(k), label=f"{what}: ~ size^{fit_exponent(x, y):.2f}")
                    k += 1
            if name == "dense":
                cx = crossing([r["P"] for r in rows], [r["matrix_free_s"] for r in rows], [r["dense_s"] for r in rows])
                if math.isfinite(cx):
                    pl.threshold(ax, cx, f"crossing P = {cx:.3g}", axis="x")
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            pl.tidy_log_ticks(ax)
        handles = [h for ax in axes[0] for h in ax.get_legend_handles_labels()[0]]
        pl.legend_outside(fig, loc="below", ncol=2, handles=handles)
        fig.suptitle(_TITLES[name])
        paths.append(pl.save_figure(fig, out_dir, f"scaling_{name}"))
    return paths


def tables_from_markdown(text: str) -> dict:
    """``{table: rows}`` read back from a markdown file :func:`report` wrote (each ``## name`` section's
    first table; numbers parsed, ``True``/``False`` as booleans), so the figures can be redrawn without
    rerunning the benchmark."""
    tables, name, header = {}, None, None
    for line in text.splitlines():
        if line.startswith("## "):
            name, header = line[3:].strip(), None
            continue
        if name not in FIGURE_SPECS or not line.startswith("|"):  # the tables of experiments.bench_scaling
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
            tables[name] = []
        elif set("".join(cells)) <= set("-: "):
            continue
        else:

            def val(c):
                if c in ("True", "False"):
                    return c == "True"
                try:
                    return float(c) if any(ch in c for ch in ".e") or c in ("nan", "inf") else int(c)
                except ValueError:
                    return c

            tables[name].append(dict(zip(header, (val(c) for c in cells))))
    return tables


def exponents(tables: dict) -> dict:
    """The fitted exponents of every table (the numbers the figures' legends show)."""
    out = {}
    lz = tables.get("lanczos") or []
    for s in ("vary n", "vary d"):
        sel = [r for r in lz if r["series"] == s]
        out[f"lanczos wall_s ~ (n*d)^p, {s}"] = fit_exponent([r["n*d"] for r in sel], [r["wall_s"] for r in sel])
        out[f"lanczos hvps ~ (n*d)^p, {s}"] = fit_exponent([r["n*d"] for r in sel], [r["hvps"] for r in sel])
    dn = tables.get("dense") or []
    out["dense_s ~ P^p"] = fit_exponent([r["P"] for r in dn], [r["dense_s"] for r in dn])
    out["matrix_free_s ~ P^p"] = fit_exponent([r["P"] for r in dn], [r["matrix_free_s"] for r in dn])
    out["crossing P (matrix-free cheaper above)"] = (
        crossing([r["P"] for r in dn], [r["matrix_free_s"] for r in dn], [r["dense_s"] for r in dn]) if dn else math.nan
    )
    tr = tables.get("train") or []
    out["train s_per_step ~ batch^p"] = fit_exponent([r["batch"] for r in tr], [r["s_per_step"] for r in tr])
    fl = tables.get("flow") or []
    for s, k in (("vary t1", "t1"), ("vary s", "stiffness")):
        sel = [r for r in fl if r["series"] == s]
        out[f"flow grad_evals ~ {k}^p"] = fit_exponent([r[k] for r in sel], [r["grad_evals"] for r in sel])
    return out


def report(tables: dict, figs: list, rel_to: pathlib.Path | None = None) -> str:
    """The markdown file: each table under its ``## name``, the fitted exponents (:func:`exponents`), the figures
    (paths relative to ``rel_to`` when given)."""
    parts = []
    for name, rows in tables.items():
        if rows:
            parts += [f"## {name}", "", markdown_table(rows, floatfmt=".4g"), ""]
    ex = exponents(tables)
    parts += [
        "## fitted exponents (log-log least squares)",
        "",
        markdown_table(
            [{"quantity": k, "value": v} for k, v in ex.items() if not (isinstance(v, float) and math.isnan(v))],
            floatfmt=".3g",
        ),
        "",
    ]
    for p in figs:
        shown = os.path.relpath(p, rel_to) if rel_to else str(p)
        parts.append(f"![{p.stem}]({shown})")
    return "\n".join(parts) + "\n"
