"""Execute experiments/notebooks/flow_vs_optimisers.ipynb (small config) and check what it computed."""

import json
import os
import pathlib

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

NB_DIR = pathlib.Path(__file__).resolve().parents[1] / "experiments" / "notebooks"
NB = NB_DIR / "flow_vs_optimisers.ipynb"
FIGURES = (
    "flow_vs_optimisers_loss",
    "flow_vs_optimisers_lambda_min",
    "flow_vs_optimisers_rank_rankme",
    "flow_vs_optimisers_rank_squared",
    "flow_vs_optimisers_escape",
)


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    fig_dir = tmp_path_factory.mktemp("nb_figures")
    nb = nbformat.read(NB, as_version=4)
    env_before = {k: os.environ.get(k) for k in ("SSL_GEOMETRY_NB_SMALL", "SSL_GEOMETRY_NB_FIGDIR", "PYTHONPATH")}
    os.environ["SSL_GEOMETRY_NB_SMALL"] = "1"
    os.environ["SSL_GEOMETRY_NB_FIGDIR"] = str(fig_dir)  # never overwrite the committed PNGs
    root = str(NB_DIR.parents[1])
    os.environ["PYTHONPATH"] = root + (os.pathsep + env_before["PYTHONPATH"] if env_before["PYTHONPATH"] else "")
    try:
        client = nbclient.NotebookClient(
            nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NB_DIR)}}
        )
        client.execute()
    finally:
        for k, v in env_before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return nb, fig_dir


@pytest.mark.slow  # executes the whole notebook (the slow tier of .ci/run)
def test_notebook_runs_and_writes_figures(executed):
    nb, fig_dir = executed
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors
    for name in FIGURES:
        path = fig_dir / f"{name}.png"
        assert path.exists() and path.stat().st_size > 5000, name
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.slow  # reads the executed notebook (the slow tier of .ci/run)
def test_notebook_numbers(executed):
    _, fig_dir = executed
    out = json.loads((fig_dir / "flow_vs_optimisers_summary.json").read_text())
    assert out["config"]["n"] == 16  # the small config ran
    summary = out["summary"]
    assert set(summary) == {"linear", "relu", "swish"}
    for head, row in summary.items():
        assert all(row["ok"].values()), (head, row["ok"])
        # SimSiam's negative cosine has an indefinite loss Hessian: Thm 4.1's premise fails ...
        assert row["lmin H_L (t=0)"] < -1.0, head
        assert row["|rho| (t=0)"] > 0.1, head
        # ... and then even the linear head's H_eff has a negative direction at pseudo-collapse.
        assert row["lmin H_eff (t=0)"] < -1e-5, head
        # From pseudo-collapse the flow collapses further (normalised std and rank drop) ...
        assert row["std flow (end)"] < 0.5 * row["std (t=0)"], head
        assert row["rank rankme flow (end)"] < row["rank rankme (t=0)"], head
        # ... and GD (lr = 0.05) stays within O(lr) of the flow on t = step * lr.
        assert abs(row["rank rankme GD (end)"] - row["rank rankme flow (end)"]) < 0.02, head


@pytest.mark.slow  # reads the executed notebook (the slow tier of .ci/run)
def test_notebook_predicted_against_measured_escape(executed):
    _, fig_dir = executed
    escape = json.loads((fig_dir / "flow_vs_optimisers_summary.json").read_text())["escape"]
    assert set(escape) == {"linear", "relu", "swish"}
    untested = []
    for head, runs in escape.items():
        assert set(runs) == {"flow", "sgd lr=0.05"}, head
        for name, r in runs.items():
            # The linearised field (flow) and the linearised SGD map predict the measured slope of log std.
            # (linearised-rate-prediction's window: once the leading modes dominate, before the nonlinear regime; a
            # run whose linearised solution itself has no such window is the rule's failure to test, no rate.)
            if r["rate_run"].endswith("no window within max_saves)"):
                assert r["measured"] != r["measured"], (head, name, r)  # NaN: no rate is made up
                untested.append((head, name))
                continue
            assert r["predicted"] > 0.01 and abs(r["measured"] / r["predicted"] - 1) <= 0.25, (head, name, r)
            assert r["t_final"] <= r["horizon"] + 0.5 * 0.05 / (1 - 0.9) + 1e-9, (head, name)
    assert len(untested) <= 1, untested  # the small config: only ReLU's SGD run (its window opens at 120x growth)
