"""Objectives compute the named loss of their method on the head outputs they produce."""

import json
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

from ssl_geometry import heads, losses, objectives
from ssl_geometry import train as train_cli

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _views(key, x):
    k1, k2 = jax.random.split(key)
    return x + 0.1 * jax.random.normal(k1, x.shape, x.dtype), x + 0.1 * jax.random.normal(k2, x.shape, x.dtype)


def test_simclr_one_way_objective_is_info_nce_one_way_of_the_projector_outputs():
    """``objective.name = "simclr_one_way"``: the loss is ``losses.info_nce_one_way(z1, z2, temperature)`` of
    the two views' projector outputs (each view through backbone and projector in train mode), not the
    symmetric NT-Xent of ``simclr``."""
    bb = heads.mlp(6, (8,), 5, activation="swish", batch_norm=True, dtype=jnp.float64)
    proj = heads.mlp(
        5, (8,), 4, activation="relu", batch_norm=True, final_batch_norm=True, bias=False, dtype=jnp.float64
    )
    obj = objectives.make_objective("simclr_one_way", bb, proj, augment=_views, temperature=0.2)
    params, state = obj.init(jax.random.PRNGKey(0))
    x = jax.random.normal(jax.random.PRNGKey(1), (8, 6), jnp.float64)
    rng = jax.random.PRNGKey(2)
    loss, (new_state, _) = obj.loss_fn(params, state, rng, {"images": x})

    def project(view):
        h, _ = bb.apply({"params": params["backbone"], **state["backbone"]}, view, train=True)
        return proj.apply({"params": params["projector"], **state["projector"]}, h, train=True)[0]

    z1, z2 = (project(v) for v in _views(rng, x))
    np.testing.assert_allclose(float(loss), float(losses.info_nce_one_way(z1, z2, temperature=0.2)), rtol=1e-12)
    assert abs(float(loss) - float(losses.info_nce(z1, z2, temperature=0.2))) > 1e-3
    assert set(new_state) == set(state)


def test_project_is_the_eval_mode_projector_on_the_features_and_embed_is_their_composition():
    """``obj.project(p, s, z)`` is the projector alone in eval mode (running BatchNorm statistics) on ``z``, and
    ``obj.embed(p, s, x) = obj.project(p, s, obj.features(p, s, x))`` exactly: one backbone pass serves any head."""
    bb = heads.mlp(6, (8,), 5, activation="swish", batch_norm=True, dtype=jnp.float64)
    proj = heads.mlp(
        5, (8,), 4, activation="relu", batch_norm=True, final_batch_norm=True, bias=False, dtype=jnp.float64
    )
    obj = objectives.make_objective("simclr", bb, proj, augment=_views, temperature=0.2)
    params, state = obj.init(jax.random.PRNGKey(0))
    # non-trivial running statistics, so eval mode differs from train mode
    state = jax.tree_util.tree_map(lambda a: a + 0.3, state)
    x = jax.random.normal(jax.random.PRNGKey(1), (7, 6), jnp.float64)
    z = obj.features(params, state, x)
    want = proj.apply({"params": params["projector"], **state["projector"]}, np.asarray(z), train=False)[0]
    np.testing.assert_allclose(np.asarray(obj.project(params, state, z)), np.asarray(want), rtol=1e-13, atol=1e-14)
    np.testing.assert_array_equal(np.asarray(obj.embed(params, state, x)), np.asarray(obj.project(params, state, z)))
    train_mode = proj.apply({"params": params["projector"], **state["projector"]}, np.asarray(z), train=True)[0]
    assert float(jnp.max(jnp.abs(train_mode - want))) > 1e-3


def test_cli_trains_a_step_of_simclr_one_way(tmp_path):
    """One step through ``python -m ssl_geometry.train``'s entry point with the new objective name."""
    wd = tmp_path / "run"
    argv = [
        "train",
        "--config",
        str(ROOT / "experiments" / "configs" / "tiny.py"),
        "--workdir",
        str(wd),
        "--config.objective.name=simclr_one_way",
        "--config.train.steps=1",
        "--config.train.log_every=1",
        "--config.train.checkpoint_every=1",
        "--config.train.metrics_every=0",
        "--config.train.progress=False",
    ]
    assert train_cli.main(argv) == 0
    recs = [json.loads(line) for line in (wd / "metrics.jsonl").read_text().splitlines() if line.strip()]
    losses_ = [r["loss"] for r in recs if "loss" in r]
    assert len(losses_) == 1 and np.isfinite(losses_[0])
