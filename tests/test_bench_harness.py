"""The benchmark harness's logic: interleaving order, ratio statistics, load refusal (milliseconds)."""

import math
import os

import jax.numpy as jnp
import numpy as np
import pytest

from experiments.benchmarks import harness


class FakeClock:
    """A clock that advances only when an implementation 'runs' (by its scripted duration)."""

    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_interleave_order_alternates_and_warmup_comes_first():
    order = harness.interleave_order(["A", "B"], repeats=3, warmup=1)
    assert [n for n, _ in order] == ["A", "B"] * 4
    assert [r for _, r in order] == [-1, -1, 0, 0, 1, 1, 2, 2]
    with pytest.raises(ValueError, match="distinct"):
        harness.interleave_order(["A", "A"], 2)
    with pytest.raises(ValueError, match="repeats"):
        harness.interleave_order(["A"], 0)


def test_interleave_calls_in_turn_and_discards_warmup():
    clock, calls = FakeClock(), []
    durations = {"A": iter([9.0, 1.0, 2.0, 3.0]), "B": iter([9.0, 2.0, 4.0, 6.0])}

    def make(name):
        def fn():
            calls.append(name)
            clock.t += next(durations[name])
            return name.lower()

        return fn

    results = {}
    times = harness.interleave({"A": make("A"), "B": make("B")}, repeats=3, warmup=1, clock=clock, results=results)
    assert calls == ["A", "B"] * 4
    assert times == {"A": [1.0, 2.0, 3.0], "B": [2.0, 4.0, 6.0]}  # the 9 s warm-up rounds dropped
    assert results == {"A": "a", "B": "b"}


def test_ratio_stats_are_per_round_ratios():
    st = harness.ratio_stats([1.0, 2.0, 3.0, 10.0], [2.0, 4.0, 6.0, 5.0])
    assert st["median"] == pytest.approx(0.5)  # ratios 0.5, 0.5, 0.5, 2.0
    assert st["q25"] == pytest.approx(0.5) and st["q75"] == pytest.approx(0.875)
    assert st["min"] == 0.5 and st["max"] == 2.0 and st["n"] == 4
    assert st["spread"] == pytest.approx(0.75)
    assert st["ratio_of_medians"] == pytest.approx(2.5 / 4.5)  # medians of A and of B
    with pytest.raises(ValueError, match="equally long"):
        harness.ratio_stats([1.0], [1.0, 2.0])
    with pytest.raises(ValueError, match="finite"):
        harness.summary([1.0, math.nan])


def test_load_guard_refuses_then_marks_when_forced(tmp_path):
    assert harness.check_load(1.0, 1.9, threshold=2) is None
    with pytest.raises(harness.LoadTooHigh, match="refusing"):
        harness.check_load(1.0, 2.5, threshold=2)  # the other processes' share unmeasured: the load after decides
    path = tmp_path / "t.md"
    with pytest.raises(harness.LoadTooHigh):
        harness.write_table(
            path,
            "T",
            "| a |",
            command="python -m x",
            load_before=3.0,
            load_after=1.0,
            threshold=2,
            env={"device": "cpu:cpu", "processor": "x", "cpu_count": 2, "python": "3", "versions": {"jax": "0"}},
        )
    assert not path.exists()
    env = {"device": "cpu:cpu", "processor": "x86", "cpu_count": 2, "python": "3.12", "versions": {"jax": "9"}}
    text = harness.write_table(
        path, "T", "| a |", command="python -m x --y", load_before=3.0, load_after=1.0, threshold=2, force=True, env=env
    )
    assert "FORCED UNDER LOAD" in text and path.read_text() == text
    assert "`python -m x --y`" in text and "3.00 before" in text and "jax 9" in text and "cpu:cpu" in text
    quiet = harness.write_table(None, "T", "| a |", command="c", load_before=0.5, load_after=0.7, threshold=2, env=env)
    assert "FORCED" not in quiet


def test_a_run_that_loads_the_machine_itself_is_quiet_and_other_processes_are_not():
    """Where the other processes' CPU share is measured it decides, not the load after the run: a 2-core run that
    leaves the load at 2.08 with nothing else running is quiet; another process using 30% of the CPU is not; the
    load before the run still decides."""
    assert harness.check_load(0.5, 2.08, threshold=2, other_share=0.004) is None
    with pytest.raises(harness.LoadTooHigh, match=r"other processes used 30.0% of the CPU"):
        harness.check_load(0.5, 1.0, threshold=2, other_share=0.30)
    with pytest.raises(harness.LoadTooHigh, match=r"3.00 before the run"):
        harness.check_load(3.0, 1.0, threshold=2, other_share=0.0)
    env = {"device": "cpu:cpu", "processor": "x86", "cpu_count": 2, "python": "3.12", "versions": {"jax": "9"}}
    text = harness.write_table(
        None, "T", "| a |", command="c", load_before=0.5, load_after=2.08, threshold=2, other_share=0.004, env=env
    )
    assert "FORCED" not in text and "other processes used 0.4% of the CPU during the run (threshold 10%)" in text


def _stat(tmp_path, busy_ticks, idle_ticks, cores=2):
    cpu_lines = "".join(f"cpu{i} 1 0 0 1 0 0 0 0 0 0\n" for i in range(cores))
    path = tmp_path / "stat"
    path.write_text(f"cpu  {busy_ticks} 0 0 {idle_ticks} 0 0 0 0 0 0\n{cpu_lines}intr 0\n")
    return str(path)


def test_other_cpu_share_is_the_machines_busy_time_less_the_processs_own_over_cores_and_wall(tmp_path):
    """A hand-made pair of samples: 2 cores for 10 s (20 CPU-seconds), the machine busy 15 s of it, the process 12 s:
    other processes used 3 / 20 = 15%; missing samples, or no time between them, give nan; ``cpu_sample`` parses ``/proc/stat``'s first line
    in clock ticks and counts the per-CPU lines."""
    a = harness.CpuSample(wall=100.0, busy=50.0, own=5.0, cores=2)
    b = harness.CpuSample(wall=110.0, busy=65.0, own=17.0, cores=2)
    assert harness.other_cpu_share(a, b) == pytest.approx(0.15)
    assert harness.other_cpu_share(a, b._replace(own=40.0)) == 0.0  # clipped at zero
    assert math.isnan(harness.other_cpu_share(None, b)) and math.isnan(harness.other_cpu_share(a, a))
    tick = os.sysconf("SC_CLK_TCK")
    s = harness.cpu_sample(_stat(tmp_path, 7 * tick, 3 * tick, cores=4))
    assert s.cores == 4 and s.busy == pytest.approx(7.0) and s.own > 0
    assert harness.cpu_sample(str(tmp_path / "absent")) is None
    (tmp_path / "bad").write_text("nonsense\n")
    assert harness.cpu_sample(str(tmp_path / "bad")) is None


def test_environment_records_the_variables_that_change_what_is_computed(monkeypatch):
    """XLA_FLAGS and JAX_DEFAULT_MATMUL_PRECISION change the timed computation (on a GPU the latter decides between
    TF32 and full float32 products), so a table run under either says so; unset, neither appears."""
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.delenv("JAX_DEFAULT_MATMUL_PRECISION", raising=False)
    assert "JAX_DEFAULT_MATMUL_PRECISION" not in harness.environment_line()
    monkeypatch.setenv("JAX_DEFAULT_MATMUL_PRECISION", "highest")
    env = harness.environment()
    assert env["JAX_DEFAULT_MATMUL_PRECISION"] == "highest"
    assert harness.environment_line(env).endswith("; JAX_DEFAULT_MATMUL_PRECISION=highest")


def test_environment_records_versions_and_device():
    env = harness.environment()
    assert "jax" in env["versions"] and env["device"].startswith("cpu")
    assert "jax " in harness.environment_line(env)


def test_assemble_marks_each_section_and_can_require_quiet(tmp_path):
    from experiments import assemble_benchmarks as ab

    docs = tmp_path / "docs"
    docs.mkdir()
    env = {"device": "cpu:cpu", "processor": "x", "cpu_count": 2, "python": "3", "versions": {"jax": "0"}}
    harness.write_table(
        docs / "bench_hessian.md", "H", "| q |", command="c", load_before=0.5, load_after=0.5, threshold=2, env=env
    )
    harness.write_table(
        docs / "bench_flow.md", "F", "| f |", command="c", load_before=5, load_after=5, threshold=2, force=True, env=env
    )
    (docs / "bench_forward.md").write_text("# old\n\n| x |\n")
    text, states = ab.assemble(tmp_path)
    assert states == {"bench_hessian.md": "quiet", "bench_flow.md": "FORCED UNDER LOAD", "bench_forward.md": "legacy"}
    assert "Status: **legacy**" in text and "## Extreme eigenvalues" in text
    with pytest.raises(SystemExit):
        ab.main(["--require-quiet"], root=tmp_path)
    assert not (tmp_path / "BENCHMARKS.md").exists()
    ab.main([], root=tmp_path)
    assert (tmp_path / "BENCHMARKS.md").read_text() == text


def test_scaling_fit_exponent_and_crossing():
    import numpy as np

    from experiments.bench_scaling import crossing, fit_exponent

    x = np.array([1e3, 1e4, 1e5, 1e6])
    assert fit_exponent(x, 3.0 * x**1.5) == pytest.approx(1.5)
    assert math.isnan(fit_exponent([5.0, 5.0], [1.0, 2.0]))
    # dense ~ P^3 / 1e6 meets matrix-free ~ P / 1e2 at P = 100
    P = np.array([10.0, 50.0, 200.0, 1000.0])
    assert crossing(P, P / 1e2, P**3 / 1e6) == pytest.approx(100.0, rel=1e-9)
    assert math.isnan(crossing(P, P, 2 * P))


def test_bench_conv_weight_gradient_matches_pytorch():
    """The convolution benchmark times the same weight gradient on both sides (one tiny layer, float32)."""
    pytest.importorskip("torch")
    from experiments import bench_conv

    (row,) = bench_conv.bench(batch=2, repeats=1, warmup=0, layers=((4, 8),))
    assert row["layer"] == "4x4x8" and row["dtype"] == "float32"
    assert row["dw_rel_diff"] < 1e-5
    assert all(row[k] > 0 for k in ("jax_fwd_s", "jax_dx_s", "jax_dw_s", "torch_fwd_s", "torch_bwd_s"))
    assert row["ratio_bwd"] == pytest.approx(row["torch_bwd_s"] / (row["jax_dx_s"] + row["jax_dw_s"]))


def test_bench_text_embeds_the_same_sentences_on_both_sides():
    """MiniLM benchmark: JAX and PyTorch embeddings of the same tokens agree (so the timing compares like with like)."""
    pytest.importorskip("torch")
    pytest.importorskip("sentence_transformers")
    from experiments import bench_text

    row = bench_text.bench(batch=4, length=8, sentences=8, repeats=1, warmup=0)
    assert row["max_abs_diff"] < 1e-5 and row["jax_sentences_s"] > 0 and row["torch_sentences_s"] > 0
    with pytest.raises(ValueError, match="multiple of `batch`"):
        bench_text.bench(batch=3, sentences=8)


@pytest.mark.parametrize("batch_norm", [False, True])
def test_bench_hessian_runs_both_problems_at_small_size(batch_norm):
    """The Hessian benchmark end to end at small sizes: the paper's estimator, ours, the reference, one table."""
    pytest.importorskip("torch")
    from experiments import bench_hessian as bh

    pb = bh.Problem(8, 6, 16, 8, batch_norm=batch_norm, view_noise=0.1 if batch_norm else None)
    m = bh.measure(pb, repeats=1, warmup=0, hvp_repeats=1, reference_method="lanczos")
    rec = m["recommended"]
    assert rec["method"] == ("full" if batch_norm else "blockwise")
    assert (rec["coupling"] > 1e-3) if batch_norm else (rec["coupling"] == 0.0)
    assert rec["rel_err_min"] <= 1e-4 and rec["rel_err_max"] <= 1e-4 and rec["signs_ok"] and rec["converged"]
    # the coupling probes: two that see no coupling, or the first, which settles a coupled Hessian
    assert m["paper"]["hvps"] == 42 and rec["hvps"] == rec["lanczos_steps"] + (1 if batch_norm else 2)
    assert m["setting"]["jax_backend"] == "cpu" and m["setting"]["torch_device"] == "cpu"
    assert ("ours" in m) is (not batch_norm)
    assert m["reference"]["lambda_min"] < 0 < m["reference"]["lambda_max"]
    text = bh.report(m, 1)
    assert "the paper's 20-step power iteration, PyTorch float32 (42 HVPs)" in text
    assert rec["error_bound"] == "gap"  # the recommended path stops on the eigenvalue error bound
    assert (
        "curvature.hessian_extremes (full Lanczos, error bound gap)" in text
        if batch_norm
        else "blockwise Lanczos (target union)" in text
    )
    assert f"ratio_le_{bh.CRITERIA[m['problem']]}" in text and "reference: " in text
    # the PyTorch baseline sees the same loss as the JAX side
    assert "JAX on cpu, PyTorch on cpu" in text
    if batch_norm:  # the distance from the certified stop to the oracle: no stop can beat the oracle, none is late
        ref = (m["reference"]["lambda_min"], m["reference"]["lambda_max"])
        rows = bh.steps_to_tol(pb, ref, starts=2)
        assert [r["start"] for r in rows] == [0, 1]
        assert all(1 <= r["oracle"] <= r["gap"] <= r["residual"] for r in rows)
        conv, rec = bh.convergence_report(rows, m), m["recommended"]
        assert f"Medians: oracle {np.median([r['oracle'] for r in rows]):g}, gap" in conv
        # the ratio a stop at the oracle step would give: its products (and the probes) at the measured unit costs
        k = rows[0]["oracle"] + rec["hvps"] - rec["lanczos_steps"]
        ratio = (k * rec["hvp_s"] + rec["setup_s"]) / m["paper"]["wall_s_median"]
        with pytest.raises(ValueError, match="`starts` must be a number of start vectors >= 1; got 0"):
            bh.steps_to_tol(pb, ref, starts=0)
        assert f"| 0 | {rows[0]['oracle']} | {rows[0]['gap']} | {rows[0]['residual']} | {ratio:.2f} |" in conv
    with pytest.raises(ValueError, match="`torch_device` must be 'auto', 'cpu' or 'cuda'; got 'tpu'"):
        bh.torch_device("tpu")
    assert bh.torch_device("auto") == "cpu"  # JAX on the CPU here: the baseline on the CPU too
    paper = bh.TorchPaper(pb)
    assert float(paper.loss().detach()) == pytest.approx(float(pb.loss(*pb.args(jnp.float32))), rel=1e-5, abs=1e-7)
