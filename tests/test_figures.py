"""The figure standard (experiments/plotting.py): its helpers, its checks, and that every figure meets it.

* Every PNG under ``results/`` and ``docs/`` is cited by a page (REPORT.md, BENCHMARKS.md, README.md,
  docs/**/*.md), resolved the way the site resolves it (docs/hooks/site.py: the root pages sit at the site
  root, which is ``docs/``), and every image a page cites exists.
* Every experiment's ``figures`` (run on its committed results.json) writes every PNG committed under its
  results directory, each through :func:`experiments.plotting.save_figure` (its stamp), so each passed the
  standard's checks; no experiment module saves or lays out a figure by hand.
* Every committed figure carries the stamp: it was drawn by the committed code (fails until results/ is
  regenerated after a change to the standard).
"""

from __future__ import annotations

import ast
import importlib
import math
import pathlib
import re
import sys

import numpy as np
import pytest

from experiments import common, plotting, suite

ROOT = pathlib.Path(__file__).resolve().parents[1]
ROOT_PAGES = ("REPORT.md", "BENCHMARKS.md", "README.md")
_IMG = re.compile(r"!\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|<img[^>]*\bsrc=\"([^\"]+)\"")


def _pages() -> list[pathlib.Path]:
    return [ROOT / p for p in ROOT_PAGES if (ROOT / p).exists()] + sorted((ROOT / "docs").rglob("*.md"))


def cited_images(page: pathlib.Path, text: str | None = None) -> set[pathlib.Path]:
    """The image files ``page`` cites (markdown images and ``<img src>``), resolved against the page's folder,
    and for a root page also against ``docs/`` (its folder on the site), whichever exists (else the first)."""
    text = page.read_text() if text is None else text
    out = set()
    for m in _IMG.finditer(text):
        link = (m.group(1) or m.group(2)).split("#")[0]
        if re.match(r"[a-z]+:", link) or not link:
            continue
        bases = [page.parent] + ([ROOT / "docs"] if page.parent == ROOT else [])
        cands = [(b / link).resolve() for b in bases]
        out.add(next((c for c in cands if c.exists()), cands[0]))
    return out


def _figures_on_disk() -> list[pathlib.Path]:
    return sorted(p.resolve() for d in ("results", "docs") for p in (ROOT / d).rglob("*.png"))


# ----------------------------------------------------------------------------- pages and files


def test_cited_images_resolves_like_the_site(tmp_path, monkeypatch):
    (tmp_path / "docs" / "b").mkdir(parents=True)
    (tmp_path / "docs" / "b" / "f.png").write_bytes(b"x")
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "g.png").write_bytes(b"x")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    page = tmp_path / "REPORT.md"
    text = '![a](r/g.png) ![b](b/f.png) ![c](docs/b/f.png) <img src="missing.png"> ![w](https://x/y.png)'
    got = cited_images(page, text)
    assert got == {
        (tmp_path / "r/g.png").resolve(),
        (tmp_path / "docs/b/f.png").resolve(),
        (tmp_path / "missing.png").resolve(),
    }
    sub = tmp_path / "docs" / "p.md"  # a docs page resolves against its own folder only
    assert cited_images(sub, "![x](../r/g.png) ![y](r/g.png)") == {
        (tmp_path / "r/g.png").resolve(),
        (tmp_path / "docs/r/g.png").resolve(),
    }


def test_every_figure_under_results_and_docs_is_cited_by_a_page():
    cited = set().union(*(cited_images(p) for p in _pages()))
    orphans = [str(p.relative_to(ROOT)) for p in _figures_on_disk() if p not in cited]
    assert not orphans, f"PNGs no page cites (cite them or delete them): {orphans}"


def test_every_image_a_page_cites_exists():
    missing = [
        f"{p.relative_to(ROOT)} -> {img}"
        for p in _pages()
        for img in cited_images(p)
        if not img.exists() and ROOT in img.parents and "site" not in img.relative_to(ROOT).parts[:1]
    ]
    assert not missing, f"pages cite images that do not exist: {missing}"


def test_committed_figures_were_drawn_by_the_standard():
    old = [str(p.relative_to(ROOT)) for p in _figures_on_disk() if plotting.stamp_of(p) != plotting.STAMP]
    assert not old, f"figures not written by experiments.plotting.save_figure (regenerate them): {old}"


# ----------------------------------------------------------------------------- every experiment's figures


@pytest.mark.parametrize("name", suite.NAMES)
def test_experiment_figures_meet_the_standard_and_write_every_committed_png(name, tmp_path):
    res_dir = ROOT / "results" / name
    if not (res_dir / "results.json").exists():
        pytest.skip(f"no committed results for {name}")
    module = importlib.import_module(f"experiments.{name}")
    try:
        module.figures(common.read_results(res_dir), tmp_path)
    except FileNotFoundError as e:  # paper_data draws from the released data; absent on a bare machine
        pytest.skip(f"{name}: figure input not on this machine ({e})")
    written = {p.name for p in tmp_path.glob("*.png")}
    committed = {p.name for p in res_dir.glob("*.png")}
    assert written, f"{name}.figures wrote no figure"
    assert committed <= written, f"committed PNGs no code writes (stale): {sorted(committed - written)}"
    for p in tmp_path.glob("*.png"):
        assert plotting.stamp_of(p) == plotting.STAMP, f"{name}/{p.name} bypassed plotting.save_figure"


def _experiment_sources() -> list[pathlib.Path]:
    return [p for p in sorted((ROOT / "experiments").rglob("*.py")) if p.name != "plotting.py"]


def test_no_experiment_lays_out_or_saves_a_figure_by_hand():
    banned = {"savefig", "subplots", "subplot_mosaic", "figure"}
    bad = []
    for path in _experiment_sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in banned
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in ("plt", "fig", "pyplot")
            ):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.func.value.id}.{node.func.attr}")
    assert not bad, f"figures must be made by plotting.figure and saved by plotting.save_figure: {bad}"


# ----------------------------------------------------------------------------- the helpers, known answers


def test_choose_scale_by_decades_and_sign():
    assert plotting.choose_scale([1.0, 5.0, 50.0]) == ("linear", None)  # 1.7 decades
    assert plotting.choose_scale([1e-3, 1.0, 10.0]) == ("log", None)  # 4 decades, all positive
    assert plotting.choose_scale([-1.0, 2e-5, 0.3]) == ("symlog", 1e-5)  # signs mix: linthresh 10^floor(log10 2e-5)
    assert plotting.choose_scale([0.0, 0.0]) == ("linear", None)
    assert plotting.choose_scale([math.nan, 3.0, math.inf]) == ("linear", None)
    assert plotting.choose_scale([-8.7e15, -1.0, 0.1])[0] == "symlog"


def test_scale_from_ignores_points_drawn_apart():
    fig, axes = plotting.figure()
    ax = axes[0, 0]
    counted = [-0.2, -1e-4, 0.05]
    ax.scatter([0, 1, 2], counted)
    assert plotting.scale_from(ax, counted, linthresh=1e-3) == "symlog"
    assert ax.get_yscale() == "symlog"
    lim = ax.get_ylim()
    assert lim[0] < -0.2 and 0.05 < lim[1] < 1.0
    n = plotting.draw_apart(ax, [0, 1, 2], [-8.7e15, 0.01, 5.0], label="uncertified")
    assert n == 3 and ax.get_ylim() == lim  # the outlier did not rescale the axis
    offsets = np.concatenate([c.get_offsets()[:, 1] for c in ax.collections[1:]])
    assert sorted(offsets) == pytest.approx(sorted([lim[0], 0.01, lim[1]]))  # off-scale points sit at the edges
    labels = [c.get_label() for c in ax.collections[1:]]
    assert labels[0].startswith("uncertified") and "off scale" in labels[0]
    assert sum(not lab.startswith("_") for lab in labels) == 1  # one legend entry for all of them
    plotting.pyplot().close(fig)


def test_check_accepts_a_standard_figure_and_names_each_breach():
    fig, axes = plotting.figure(1, 2, height=3.0)
    for ax in axes[0]:
        ax.plot([1, 2], [3, 4], label="a")
        ax.set_xlabel("x [s]")
    axes[0, 0].set_ylabel("y")
    plotting.threshold(axes[0, 0], 3.5, "threshold 3.5")
    plotting.legend_outside(axes[0, 1], loc="below")
    assert plotting.check(fig) == []  # the second panel's y is named once for the row
    plotting.pyplot().close(fig)

    plt = plotting.pyplot()
    fig, ax = plt.subplots(figsize=(9, 3))  # not made by figure(), too wide, unlabelled, legend on the data
    ax.plot([0, 1], [0, 1], label="a")
    ax.legend(loc="center")
    ax.text(0.5, 0.2, "tiny", fontsize=5)
    problems = " | ".join(plotting.check(fig))
    for part in (
        "not made by experiments.plotting.figure",
        "9.00 in wide",
        "no x label",
        "no y label",
        "a legend covers axes",
        "'tiny' at 5.0 pt",
    ):
        assert part in problems
    plt.close(fig)


def test_twin_axes_need_their_own_label():
    fig, axes = plotting.figure()
    ax = axes[0, 0]
    ax.plot([0, 1], [0, 1])
    ax.set(xlabel="epoch", ylabel="std")
    twin = ax.twinx()
    twin.plot([0, 1], [1, 0])
    assert any("no y label" in p for p in plotting.check(fig))
    twin.set_ylabel("lambda_max")
    assert plotting.check(fig) == []
    plotting.pyplot().close(fig)


def test_save_figure_refuses_a_breach_and_stamps_what_it_writes(tmp_path):
    fig, axes = plotting.figure(width=4.0)
    axes[0, 0].plot([1, 2], [1, 2])
    with pytest.raises(ValueError, match="no x label"):
        plotting.save_figure(fig, tmp_path, "bad")
    assert not (tmp_path / "bad.png").exists()
    fig, axes = plotting.figure(width=4.0)
    axes[0, 0].plot([1, 2], [1, 2])
    axes[0, 0].set(xlabel=plotting.label("time", "s"), ylabel="y")
    assert axes[0, 0].get_xlabel() == "time [s]"
    path = plotting.save_figure(fig, tmp_path, "good")
    assert plotting.stamp_of(path) == plotting.STAMP
    from PIL import Image

    with Image.open(path) as im:
        assert im.size[0] == pytest.approx(4.0 * plotting.DPI, abs=2)


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="width"):
        plotting.figure(width=9.0)
    with pytest.raises(ValueError, match="height"):
        plotting.figure(height=0)
    fig, axes = plotting.figure()
    with pytest.raises(ValueError, match="loc"):
        plotting.legend_outside(axes[0, 0], loc="inside")
    with pytest.raises(ValueError, match="axis"):
        plotting.threshold(axes[0, 0], 1.0, "t", axis="z")
    with pytest.raises(ValueError, match="linthresh"):
        plotting.scale_from(axes[0, 0], [1.0], linthresh=0.0)
    with pytest.raises(ValueError, match="same shape|one shape"):
        plotting.draw_apart(axes[0, 0], [1, 2], [1], label="x")
    with pytest.raises(ValueError, match="values"):
        plotting.loss_shape([])
    plotting.pyplot().close(fig)


def test_loss_shape_running_mean_then_min_range():
    x, y = plotting.loss_shape([4.0, 2.0, 0.0, 4.0, 5.0], window=2, floor=0.0)
    np.testing.assert_allclose(x, [0.5, 1.5, 2.5, 3.5])
    np.testing.assert_allclose(y, [2 / 3.5, 0.0, 1 / 3.5, 1.0])  # means 3, 1, 2, 4.5 -> (m - 1) / 3.5
    _, y = plotting.loss_shape([1.0, 2.0, 3.0], window=10, floor=1e-4)  # window capped at the curve
    np.testing.assert_allclose(y, [1e-4])


def test_bench_scaling_tables_round_trip_through_its_markdown(tmp_path):
    from experiments import bench_scaling as B

    tables = {
        "lanczos": [
            {
                "series": "vary n",
                "n": 8,
                "d": 4,
                "n*d": 32,
                "wall_s": 0.5,
                "hvps": 10,
                "s_per_hvp": 0.05,
                "converged": True,
                "lambda_min": -1e-3,
                "lambda_max": 2.0,
            }
        ],
        "flow": [
            {
                "series": "vary t1",
                "t1": 5.0,
                "stiffness": 1.0,
                "grad_evals": 103,
                "steps": 17,
                "wall_s": 0.0024,
                "status": "successful",
            },
            {
                "series": "vary s",
                "t1": 5.0,
                "stiffness": 4.0,
                "grad_evals": 301,
                "steps": 44,
                "wall_s": 0.0047,
                "status": "successful",
            },
        ],
    }
    back = B.tables_from_markdown(B.report(tables, []))
    assert back == tables
    paths = B.figures(back, tmp_path)
    assert [p.name for p in paths] == ["scaling_lanczos.png", "scaling_flow.png"]
    assert all(plotting.stamp_of(p) == plotting.STAMP for p in paths)
