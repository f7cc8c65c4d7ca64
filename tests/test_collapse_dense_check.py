"""experiments.collapse_dense_check: the closed-form dense lambda_min(H_eff) against the smoke run's own dense
eigensolve of the whole (n d) x (n d) H_eff, on the same rebuilt states (one per objective and kind of head)."""

import json
import pathlib

import jax
import numpy as np
import pytest

from experiments import collapse_dense_check as D
from experiments.collapse_hessians.cases import all_cases
from experiments.configs import collapse_hessians as C

jax.config.update("jax_enable_x64", True)
ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.parametrize(
    "label",
    ["mse_target/gelu/1.0", "mse_target/relu/0.3", "dino_fixed_teacher/identity/0.3", "dino_fixed_teacher/tanh/1.8"],
)
def test_closed_forms_match_the_smoke_runs_dense_eigensolve(label):
    """lambda_min(H_eff) to 1e-10 of lambda_max (the experiment's is a dense float64 eigensolve at n d = 24), |rho| to
    1e-9, and the sign: an unstable smooth head, a degenerate ReLU state (a dead unit: lambda_min = 0 to rounding),
    a linear and a smooth DINO head."""
    cfg = C.get_config("smoke")
    res = json.loads((ROOT / "results" / "collapse_hessians" / "results.json").read_text())
    assert res["variant"] == "smoke"
    cases = list(all_cases(cfg))
    o, act, s = label.split("/")
    (i,) = [j for j, c in enumerate(cases) if c[:2] == (o, act) and c[3] == "equilibrium" and c[4] == float(s)]
    row = res["measurements"]["cases"][i]
    got = D.check_case(cfg, i, o, act, float(s))
    assert got["rho_norm"] == pytest.approx(row["rho_norm"], rel=1e-9)
    assert abs(got["lambda_min_H_eff"] - row["lambda_min_H_eff"]) <= 1e-10 * abs(row["lambda_max_H_eff"])
    want = {"mse_target/gelu/1.0": -1, "mse_target/relu/0.3": 0}.get(label, 1)
    cert = {c["case"]: c for c in res["measurements"]["certificates"]}[i]
    assert got["sign"] == want == cert["predicted_sign"]


def test_the_closed_forms_refuse_an_unknown_objective():
    with pytest.raises(ValueError, match="`objective` must be"):
        D.dense_blocks(np.eye(2), np.eye(2), "tanh", np.ones(2), "simsiam", np.zeros((3, 2)))


@pytest.mark.parametrize("content", [None, "{not json", '{"variant": "smoke"}', '{"variant": "bogus"}'])
def test_the_command_refuses_what_is_not_a_results_file_in_one_line(tmp_path, content):
    """``python -m experiments.collapse_dense_check PATH``: a missing file, bad JSON, a file without the cases and
    certificates, or an unknown variant exit 2 with one line naming ``results``, before any state is built."""
    import subprocess
    import sys

    path = tmp_path / "results.json"
    if content is not None:
        path.write_text(content)
    p = subprocess.run(
        [sys.executable, "-m", "experiments.collapse_dense_check", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 2, p.stderr
    (line,) = [x for x in p.stderr.splitlines() if x.startswith("collapse_dense_check:")]
    assert "`results` must be a collapse_hessians results.json" in line and str(path) in line
