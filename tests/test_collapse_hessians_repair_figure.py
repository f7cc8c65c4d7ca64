"""repaired.png (experiments/collapse_hessians/repair_figure.py): what each panel draws, read back from the figure."""

import numpy as np
import pytest

from experiments import plotting
from experiments.collapse_hessians import repair_figure


def _row(act, lmin, tol=1e-6, rho=1.0):
    return {
        "state": "equilibrium",
        "certified": True,
        "holds": True,
        "batch_norm": False,
        "rho_norm": rho,
        "objective": "mse_target",
        "activation": act,
        "residual_scale": 0.3,
        "head_kind": "smooth",
        "lambda_min_H_eff": lmin,
        "eig_tol": tol,
    }


def _cert(case, sign, conclusion=None, rho=1.0):
    return {
        "case": case,
        "rho_norm": rho,
        "predicted_sign": sign,
        "critical_scale": 2.0,
        "critical_bounds": [1, 3],
        "conclusion": conclusion or {-1: "unstable", 0: "degenerate", 1: "stable"}[sign],
    }


def _sweep(label, p, m, sweep=(0.5, 8.0), first=1):
    return {
        "label": label,
        "predicted_crossing": p,
        "crossing": m,
        "sweep": None if sweep is None else list(sweep),
        "first_sign": first,
    }


def _yspan(patch):
    """``[ymin, ymax]`` of an ``axhspan`` (a Rectangle in matplotlib >= 3.9, a Polygon before)."""
    if hasattr(patch, "get_height"):
        return [patch.get_y(), patch.get_y() + patch.get_height()]
    ys = sorted({float(y) for _, y in patch.get_xy()})
    return [ys[0], ys[-1]]


@pytest.fixture
def drawn(monkeypatch):
    """The figures repair_figure saves, kept open to read back."""
    figs = []
    real = plotting.save_figure

    def keep(fig, out_dir, name):
        figs.append(fig)
        return real(fig, out_dir, name)

    monkeypatch.setattr(plotting, "save_figure", keep)
    return figs


def _measurements():
    rows = [_row("swish", -5e-6), _row("tanh", 3e-6), _row("gelu", 5e-7), _row("relu", 2e-6)]
    certs = [_cert(0, -1), _cert(1, 1), _cert(2, 1), _cert(3, 1, "premise violated (G not PSD)")]
    sweeps = [_sweep("mse/swish", 2.0, 2.004), _sweep("mse/tanh", 3.0, None), _sweep("dino/swish", 10.6, None, None)]
    return {"cases": rows, "certificates": certs, "critical_sweeps": sweeps}


def test_both_panels_draw_the_deciding_tolerance_and_count_every_state(tmp_path, drawn):
    path = repair_figure.figure(_measurements(), tmp_path, 0.01)
    assert path == tmp_path / "repaired.png" and path.stat().st_size > 1000
    top, bottom = drawn[0].axes[:2]
    labels = top.get_legend_handles_labels()[1]
    # gelu: predicted +1, measured 5e-7 inside tol 1e-6 (sign 0): the one mismatch; relu makes no prediction
    assert "prediction matched (2)" in labels and "mismatch (1)" in labels
    assert any(lb.startswith("no prediction (G not PSD; not counted, 1)") for lb in labels)
    band = [p for p in top.patches if np.allclose(_yspan(p), [-1.0, 1.0])]
    assert band and top.get_yscale() == "symlog"
    mismatch = [c for c in top.collections if c.get_label() == "mismatch (1)"][0]
    assert mismatch.get_offsets()[0][1] == pytest.approx(0.5)  # lambda_min / tol, inside the band
    b_labels = bottom.get_legend_handles_labels()[1]
    assert "measured crossing (1)" in b_labels
    assert any(lb.startswith("no sign change on the sweep (1); \u25b2\u25bc: off scale") for lb in b_labels)
    none = [c for c in bottom.collections if c.get_label().startswith("no sign change")][0]
    assert none.get_offsets()[0][1] == pytest.approx(bottom.get_ylim()[1])  # stable throughout: at the top edge
    assert [p for p in bottom.patches if np.allclose(_yspan(p), [0.99, 1.01])]
    assert "2 swept, 1 not buildable (DINO r < 2)" in bottom.get_title()
    assert [t.get_text() for t in bottom.get_xticklabels()] == ["mse/swish", "mse/tanh"]


def test_nothing_is_drawn_for_a_dry_run_or_without_a_certified_equilibrium(tmp_path):
    assert repair_figure.figure({"cases": [], "dry_run": {}}, tmp_path, 0.01) is None
    m = _measurements()
    m["cases"] = [{**r, "certified": False} for r in m["cases"]]
    assert not repair_figure.drawn(m) and repair_figure.figure(m, tmp_path, 0.01) is None
    assert not (tmp_path / "repaired.png").exists()


def test_a_zero_tolerance_or_rtol_is_refused_by_name(tmp_path):
    m = _measurements()
    m["cases"][0]["eig_tol"] = 0.0
    with pytest.raises(ValueError, match="`tol` must be > 0"):
        repair_figure.figure(m, tmp_path, 0.01)
    with pytest.raises(ValueError, match="crossing_rtol"):
        repair_figure.figure(_measurements(), tmp_path, 0.0)
