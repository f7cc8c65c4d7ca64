"""The objective table is the one source of every objective (``docs/howto/extend.md``, "Add a training objective").

The first tests follow the how-to's recipe exactly: a throwaway loss and one :class:`~ssl_geometry.objectives.
ObjectiveSpec` for it, put into :data:`~ssl_geometry.objectives.TABLE` for the test only (``monkeypatch``
restores the table), and then the losses registry, ``make_objective``, the config validator (its fields and the
batch a ``BatchAboveDim`` asks for), the builders and a training-loss evaluation all see it, with the loss's
value computed here by hand. The others check that the names the library publishes (``losses.REGISTRY``, the
aliases, ``objectives.OBJECTIVES``, ``EMA_METHODS``, ``PREDICTOR_METHODS``, the ``objective.*`` config fields and
``make_objective``'s keywords) come from the table and still are what they were before the table, that a spec
whose wiring contradicts itself is refused, and that the recipe's two library files are the only places a loss
is written down: each spec sits beside its function in its family module's ``SPECS``, each loss of the table is
published in ``ssl_geometry.losses`` under its table name, and no other library code names a loss or objective.
"""

import ast
import pathlib
import sys

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from ssl_geometry import heads, losses, objectives, trainer
from ssl_geometry import train as train_cli

ROOT = pathlib.Path(__file__).resolve().parents[1]
TINY = ROOT / "experiments" / "configs" / "tiny.py"


# ----------------------------------------------------------------------------- the recipe, step by step


def toy_alignment(u1, u2, *, weight=1.0):
    """Step 1 of the recipe, the loss: ``weight * (1/n) sum_i |u1_i - u2_i|^2``."""
    return weight * jnp.mean(jnp.sum((u1 - u2) ** 2, axis=-1))


def _ema():
    """The table's one ``ema`` hyper-parameter (an objective with an EMA target reads it)."""
    return next(h for h in objectives.TABLE["byol"].hypers if h.name == "ema")


def _weight_hyper():
    def positive(field, v):
        if not isinstance(v, float) or v <= 0:
            raise ValueError(f"{field}: expected a float > 0, got {v!r}.")

    return objectives.Hyper("toy_weight", 2.0, positive, "weight of the toy alignment")


def _toy_spec(name="toy_alignment", **kw):
    """Step 2 of the recipe: one ObjectiveSpec (no predictor, no EMA target, one new hyper-parameter)."""
    loss = losses.LossSpec(
        toy_alignment, ("u1", "u2"), (0, 1), (), False, losses.BatchNeeds(False, 1, "per sample"), True, 2, "cosine"
    )
    fields = dict(
        aliases=("toy",),
        objective=name,
        inputs=("z1", "z2"),
        options={"weight": "toy_weight"},
        hypers=(_weight_hyper(),),
    )
    return objectives.ObjectiveSpec(name, loss, **{**fields, **kw})


def _toy_target_spec():
    """A second throwaway objective with a predictor and an EMA target: ``|p1 - t2|^2`` (BYOL without norms)."""
    loss = losses.LossSpec(
        toy_alignment, ("p", "t"), (0,), (1,), False, losses.BatchNeeds(False, 1, "per sample"), True, 2, "cosine"
    )
    return objectives.ObjectiveSpec(
        "toy_target",
        loss,
        objective="toy_target",
        inputs=("p1", "t2"),
        predictor=True,
        ema_target=True,
        hypers=(_ema(),),
    )


@pytest.fixture
def toy(monkeypatch):
    """The throwaway objectives in the table for one test; ``monkeypatch`` takes them out again."""
    monkeypatch.setitem(objectives.TABLE, "toy_alignment", _toy_spec())
    monkeypatch.setitem(objectives.TABLE, "toy_target", _toy_target_spec())
    return objectives.TABLE["toy_alignment"]


def _models(dtype=jnp.float64):
    bb = heads.mlp(6, (8,), 5, activation="swish", dtype=dtype)  # no BatchNorm: train mode = a plain function
    proj = heads.mlp(5, (8,), 4, activation="relu", dtype=dtype)
    pred = heads.mlp(4, (3,), 4, activation="relu", dtype=dtype)
    return bb, proj, pred


def _views(key, x):
    return x, 0.5 * x + 0.1


def _tiny_config(**objective):
    """The shipped ``tiny`` config with the ``objective`` fields given."""
    d = train_cli.parse_args(["prog", f"--config={TINY}", "--workdir=x"])[0].to_dict()
    d["objective"].update(objective)
    return ml_collections.ConfigDict(d)


def test_the_losses_registry_sees_a_spec_put_into_the_table(toy):
    assert losses.REGISTRY["toy_alignment"] is toy.loss
    assert losses.get("toy_alignment") is toy_alignment and losses.get("TOY") is toy_alignment  # alias
    assert losses.spec("toy") is toy.loss and losses.LOSSES["toy_alignment"] is toy_alignment
    assert losses.NEEDS_BATCH["toy_alignment"] == (False, 1, "per sample")
    assert losses.min_batch_size("toy") == 1
    assert list(losses.REGISTRY)[-2:] == ["toy_alignment", "toy_target"]


def test_the_objective_names_see_a_spec_put_into_the_table(toy):
    assert objectives.OBJECTIVES[-2:] == ("toy_alignment", "toy_target")
    assert "toy_target" in objectives.EMA_METHODS and "toy_target" in objectives.PREDICTOR_METHODS
    assert "toy_alignment" not in objectives.EMA_METHODS and "toy_alignment" not in objectives.PREDICTOR_METHODS


def test_make_objective_trains_the_spec_with_its_hyper_parameter(toy):
    """The training loss of the toy objective is ``toy_weight * mean |z1 - z2|^2`` of the projector outputs of the
    two views, computed here by hand; the default weight is the spec's; no EMA target is kept."""
    bb, proj, _ = _models()
    x = jax.random.normal(jax.random.PRNGKey(1), (8, 6), jnp.float64)
    for given, weight in (({}, 2.0), ({"toy_weight": 3.5}, 3.5)):
        obj = objectives.make_objective("toy_alignment", bb, proj, augment=_views, **given)
        params, state = obj.init(jax.random.PRNGKey(0))
        loss, (new_state, _) = obj.loss_fn(params, state, jax.random.PRNGKey(2), {"images": x})

        def project(v):
            h = bb.apply({"params": params["backbone"]}, v, train=True)[0]
            return np.asarray(proj.apply({"params": params["projector"]}, h, train=True)[0])

        z1, z2 = (project(v) for v in _views(None, x))
        want = weight * np.mean(np.sum((z1 - z2) ** 2, axis=1))
        np.testing.assert_allclose(float(loss), want, rtol=1e-12)
        assert "target" not in state and set(new_state) == set(state)
    with pytest.raises(ValueError, match="toy_weight"):
        objectives.make_objective("toy_alignment", bb, proj, toy_weight=-1.0)
    with pytest.raises(ValueError, match="has no predictor"):
        objectives.make_objective("toy_alignment", bb, proj, _models()[2])


def test_a_spec_with_a_predictor_and_an_ema_target_reads_their_outputs(toy):
    """``inputs=("p1", "t2")``: the loss sees the predictor output of view 1 and the EMA target's projector output
    of view 2 (the target, a copy of the online network at the start, moved here so that ``t2 != z2``); ``ema``
    reaches the state update."""
    bb, proj, pred = _models()
    obj = objectives.make_objective("toy_target", bb, proj, pred, augment=_views, ema=0.5, total_steps=4)
    params, state = obj.init(jax.random.PRNGKey(0))
    assert set(state["target"]["params"]) == {"backbone", "projector"}
    target = jax.tree_util.tree_map(lambda a: 0.9 * a, state["target"]["params"])
    state = {**state, "target": {**state["target"], "params": target}}
    x = jax.random.normal(jax.random.PRNGKey(1), (8, 6), jnp.float64)
    loss, _ = obj.loss_fn(params, state, jax.random.PRNGKey(2), {"images": x})
    x1, x2 = _views(None, x)
    run = lambda m, k, v, p=params: m.apply({"params": p[k]}, v, train=True)[0]
    p1 = np.asarray(run(pred, "predictor", run(proj, "projector", run(bb, "backbone", x1))))
    t2 = np.asarray(run(proj, "projector", run(bb, "backbone", x2, target), target))
    np.testing.assert_allclose(float(loss), np.mean(np.sum((p1 - t2) ** 2, axis=1)), rtol=1e-12)
    moved = jax.tree_util.tree_map(lambda a: a + 1.0, params)
    new = obj.update_state(moved, state, 0)  # tau_0 = 0.5 at step 0: halfway to the online network
    jax.tree_util.tree_map(
        lambda got, t, p: np.testing.assert_allclose(np.asarray(got), 0.5 * t + 0.5 * (p + 1.0), rtol=1e-12),
        new["target"]["params"],
        target,
        {k: params[k] for k in ("backbone", "projector")},
    )
    with pytest.raises(ValueError, match="needs a `predictor`"):
        objectives.make_objective("toy_target", bb, proj)


def test_the_validator_and_the_builders_see_the_spec(toy):
    cfg = _tiny_config(name="toy_alignment", toy_weight=3.0)
    trainer.validate_config(cfg)
    obj = trainer.build_objective(cfg, (8, 8, 3), 10)
    assert obj.name == "toy_alignment" and "predictor" not in obj.groups
    with pytest.raises(ValueError, match=r"objective\.toy_weight: expected a float > 0, got -1\.0"):
        trainer.validate_config(_tiny_config(name="toy_alignment", toy_weight=-1.0))
    built = trainer.build_objective(_tiny_config(name="toy_target"), (8, 8, 3), 10)
    assert "predictor" in built.groups


def test_the_trainer_takes_a_step_of_the_spec(toy):
    bb, proj, _ = _models(jnp.float32)
    obj = objectives.make_objective("toy_alignment", bb, proj, augment=_views, toy_weight=1.5, total_steps=5)
    tx, sched = trainer.make_optimizer({"name": "sgd", "lr": 0.01, "momentum": 0.0}, 5, 8)
    state = trainer.init_train_state(obj, tx, jax.random.PRNGKey(0), 3)
    batch = {"images": jax.random.normal(jax.random.PRNGKey(1), (8, 6)), "labels": jnp.arange(8) % 3}
    want = float(obj.loss_fn(state["params"], state["obj_state"], jax.random.PRNGKey(9), batch)[0])
    new, m = jax.jit(trainer.make_train_step(obj, tx, sched))(state, batch)
    assert int(new["step"]) == 1 and float(m["rel_update/head"]) > 0
    np.testing.assert_allclose(float(m["loss"]), want, rtol=1e-5)  # the views do not depend on the key


def test_taking_the_spec_out_of_the_table_takes_it_out_everywhere():
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(objectives.TABLE, "toy_alignment", _toy_spec())
        assert "toy_alignment" in objectives.OBJECTIVES and "toy" in _alias_names()
        trainer.validate_config(_tiny_config(name="toy_alignment"))
    assert "toy_alignment" not in losses.REGISTRY and "toy_alignment" not in objectives.OBJECTIVES
    with pytest.raises(ValueError, match="Unknown loss name 'toy'"):
        losses.get("toy")
    with pytest.raises(ValueError, match=r"objective\.name"):
        trainer.validate_config(_tiny_config(name="toy_alignment"))
    with pytest.raises(TypeError, match="toy_weight"):
        objectives.make_objective("simclr", *_models()[:2], toy_weight=1.0)


def _alias_names():
    return {a for s in objectives.TABLE.values() for a in s.aliases}


def test_a_batch_above_the_feature_dimension_is_read_from_the_spec(monkeypatch):
    """``batch_above_dim=BatchAboveDim(3, ...)``: ``min_batch_size`` with the dimension is ``k + 3``, the validator
    refuses ``data.batch_size < out_dim + 3`` with the spec's reason (and the margin in both suggestions) and takes
    ``out_dim + 3``; W-MSE's message is the one it had when the validator named it (2026-12-05), byte for byte."""
    above = objectives.BatchAboveDim(3, "the toy loss needs {k} + 3 rows")
    monkeypatch.setitem(objectives.TABLE, "toy_alignment", _toy_spec(batch_above_dim=above))
    assert losses.min_batch_size("toy", 10) == 13 and losses.min_batch_size("toy") == 1
    assert losses.min_batch_size("toy", 0) == 3 and losses.min_batch_size("wmse", 64) == 65
    assert losses.min_batch_size("mse", 64) == 1 and losses.min_batch_size("info_nce", 64) == 2
    with pytest.raises(ValueError) as err:
        trainer.validate_config(_tiny_config(name="toy_alignment"), devices=False)  # batch 64, out_dim 64
    assert str(err.value) == (
        "`data.batch_size`: the toy loss needs 64 + 3 rows (model.projector.out_dim), which needs a batch of at "
        "least 67; got 64. Use data.batch_size >= 67 or model.projector.out_dim <= 61."
    )
    ok = _tiny_config(name="toy_alignment")
    ok.data.batch_size, ok.model.projector.out_dim = 67, 64
    trainer.validate_config(ok, devices=False)
    with pytest.raises(ValueError) as err:
        trainer.validate_config(_tiny_config(name="wmse"), devices=False)
    assert str(err.value) == (
        "`data.batch_size`: W-MSE whitens each view with the covariance of its 64 projector outputs "
        "(model.projector.out_dim), which needs a batch of at least 65; got 64. "
        "Use data.batch_size >= 65 or model.projector.out_dim <= 63."
    )
    trainer.validate_config(_tiny_config(name="vicreg"), devices=False)  # no spec bound: batch 64 = out_dim is fine
    for bad in (objectives.BatchAboveDim(-1, "why"), objectives.BatchAboveDim(1.5, "why")):
        with pytest.raises(TypeError, match="`batch_above_dim` must be None or a BatchAboveDim"):
            _toy_spec(batch_above_dim=bad)


# ----------------------------------------------------------------------------- two library files per new loss

#: The recipe's files for a loss: its family module (function and spec) and the public namespace (its name).
LOSSES_NAMESPACE = ROOT / "ssl_geometry" / "losses.py"


def _family_modules():
    """The family modules of the table's losses, in table order (the module of each spec's function)."""
    return list(dict.fromkeys(sys.modules[s.loss.fn.__module__] for s in objectives.TABLE.values()))


def test_each_spec_sits_beside_its_loss_and_the_table_collects_them():
    """The table is the families' ``SPECS`` in order, each spec in the ``SPECS`` of the module that defines its
    function, whose last name is the spec's ``family``: the registry holds no spec of its own."""
    families = _family_modules()
    assert [m.__name__.rsplit(".", 1)[1] for m in families] == ["cosine", "contrastive", "redundancy", "distillation"]
    assert [s for m in families for s in m.SPECS] == list(objectives.TABLE.values())
    for name, s in objectives.TABLE.items():
        module = sys.modules[s.loss.fn.__module__]
        assert any(x is s for x in module.SPECS) and s.loss.family == module.__name__.rsplit(".", 1)[1], name
        assert s.loss.fn.__name__ == name, f"{name}: a table loss is defined under its table name"


def test_every_loss_of_the_table_is_published_under_its_table_name():
    """``ssl_geometry.losses.<name>`` is the spec's function for every spec of the table, in ``__all__`` and listed
    (````name````) in the namespace docstring -- the one line a new loss adds to ``ssl_geometry/losses.py``."""
    for name, s in objectives.TABLE.items():
        assert getattr(losses, name) is s.loss.fn and name in losses.__all__, name
        assert f"``{name}``" in losses.__doc__, name


def _named_in_code(path, names):
    """``(line, string)`` of each string literal in ``path`` that is one of ``names``, docstrings left out."""
    tree = ast.parse(path.read_text())
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
    }
    return [
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in names and id(n) not in docs
    ]


def test_no_library_code_but_the_recipe_files_names_a_loss_or_an_objective():
    """A loss, alias or objective name appears as a string in code only in its family module and in
    ``ssl_geometry/losses.py``'s ``__all__``: the validator, the registry, ``make_objective`` and the builders
    read the table (W-MSE's minimum batch is its spec's ``batch_above_dim``, not a name in the validator)."""
    table = objectives.TABLE.values()
    names = (
        {s.name for s in table} | {s.objective for s in table if s.objective} | {a for s in table for a in s.aliases}
    )
    recipe = {pathlib.Path(m.__file__) for m in _family_modules()} | {LOSSES_NAMESPACE}
    found = {
        str(path.relative_to(ROOT)): hits
        for path in sorted((ROOT / "ssl_geometry").rglob("*.py"))
        if path not in recipe and (hits := _named_in_code(path, names))
    }
    assert not found, f"library code that names a loss or objective outside the recipe's files: {found}"
    assert _named_in_code(LOSSES_NAMESPACE, names), "the check reads string literals (losses.__all__ has them)"


# ----------------------------------------------------------------------------- the table is the one source

#: The objectives, their sets, the aliases and the hyper-parameter defaults as they were before the table
#: (``objectives.py`` / ``registry.py`` of 2026-12-05): the table must still hold each of them as it was (a spec
#: added later adds to them, so these are checked as subsets).
BEFORE_OBJECTIVES = {
    "simsiam", "byol", "simclr", "simclr_one_way", "moco", "moco_v3", "barlow_twins", "vicreg", "dino",
    "spectral_contrastive", "wmse",
}  # fmt: skip
BEFORE_ALIASES = {
    "simclr": "info_nce", "nt_xent": "info_nce", "ntxent": "info_nce", "simclr_one_way": "info_nce_one_way",
    "mocov2": "moco", "moco_v2": "moco", "mocov3": "moco_v3", "barlow": "barlow_twins", "w_mse": "wmse",
    "spectral": "spectral_contrastive", "alignment": "mse",
}  # fmt: skip
BEFORE_DEFAULTS = {
    "temperature": 0.1, "ema": 0.99, "queue_size": 4096, "barlow_lambda": 5e-3, "vicreg_coeffs": (25.0, 25.0, 1.0),
    "dino_temps": (0.1, 0.04), "dino_center_momentum": 0.9,
}  # fmt: skip


def test_the_losses_registry_is_the_table():
    table = objectives.TABLE
    assert list(losses.REGISTRY) == list(table) == list(losses.LOSSES) == list(losses.NEEDS_BATCH)
    for name, s in table.items():
        assert s.name == name and losses.REGISTRY[name] is s.loss and losses.LOSSES[name] is s.loss.fn
        assert losses.NEEDS_BATCH[name] is s.loss.batch
    aliases = {a: s.name for s in table.values() for a in s.aliases}
    assert BEFORE_ALIASES.items() <= aliases.items()
    for alias, name in BEFORE_ALIASES.items():
        assert losses.get(alias) is table[name].loss.fn


def test_the_objective_names_and_sets_are_the_table():
    specs = [s for s in objectives.TABLE.values() if s.objective is not None]
    assert objectives.OBJECTIVES == tuple(s.objective for s in specs)
    assert BEFORE_OBJECTIVES <= set(objectives.OBJECTIVES) and len(set(objectives.OBJECTIVES)) == len(specs)
    assert objectives.EMA_METHODS == {s.objective for s in specs if s.ema_target}
    assert objectives.PREDICTOR_METHODS == {s.objective for s in specs if s.predictor}
    assert objectives.EMA_METHODS & BEFORE_OBJECTIVES == frozenset({"byol", "moco", "moco_v3", "dino"})
    assert objectives.PREDICTOR_METHODS & BEFORE_OBJECTIVES == frozenset({"simsiam", "byol", "moco_v3"})


def test_the_hyper_parameters_are_the_table():
    """make_objective's keywords and the ``objective.*`` config fields are the table's hyper-parameters, with the
    defaults they had; ``-1`` is refused for each, naming the field."""
    hypers = {h.name: h for s in objectives.TABLE.values() for h in s.hypers}
    assert BEFORE_DEFAULTS.items() <= {n: h.default for n, h in hypers.items()}.items()
    for name in BEFORE_DEFAULTS:
        with pytest.raises(ValueError, match=rf"^objective\.{name}(\[0\])?: expected"):
            trainer.validate_config(_tiny_config(**{name: -1}))
    bb, proj, _ = _models()
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['temprature'\]"):
        objectives.make_objective("simclr", bb, proj, temprature=0.2)


def test_an_objective_without_an_ema_target_is_given_no_target_outputs():
    """Each objective's loss reads only the outputs it has: no spec names ``t1``/``t2`` without an EMA target
    or ``p1``/``p2`` without a predictor, and a spec that does is refused when it is made."""
    for s in objectives.TABLE.values():
        reads = {k.rstrip("12") for k in s.inputs if k not in s.state}
        assert ("t" in reads) <= s.ema_target and ("p" in reads) <= s.predictor, s.name
    with pytest.raises(ValueError, match="reads the EMA target outputs"):
        _toy_spec(inputs=("z1", "t2"))
    with pytest.raises(ValueError, match="reads the predictor outputs"):
        _toy_spec(inputs=("p1", "z2"))


@pytest.mark.parametrize(
    "change, match",
    [
        ({"objective": "other"}, "must be its name or one of its aliases"),
        ({"inputs": ("z1",)}, "one value per loss argument"),
        ({"inputs": ("z1", "q2")}, "input 'q2' is none of"),
        ({"options": {"weight": "nope"}}, r"hyper-parameters \['nope'\] not in `hypers`"),
        ({"ema_target": True, "inputs": ("z1", "t2")}, "needs the `ema` hyper-parameter"),
        ({"state": {"queue": lambda *a: 0}, "inputs": ("z1", "queue")}, "a stateful loss reads exactly one `state`"),
    ],
)
def test_a_self_contradicting_spec_is_refused_when_made(change, match):
    with pytest.raises(ValueError, match=match):
        _toy_spec(**change)


def test_a_loss_without_objective_takes_no_training_fields():
    loss = objectives.TABLE["mse"].loss
    with pytest.raises(ValueError, match="takes no training fields"):
        objectives.ObjectiveSpec("mse2", loss, inputs=("z1", "z2"))


def test_table_conflicts_are_named(monkeypatch):
    """A key that is not its spec's name, an alias of two losses and two definitions of one hyper-parameter."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(objectives.TABLE, "wrong_key", _toy_spec())
        with pytest.raises(ValueError, match="a spec's key is its name"):
            losses.get("mse")
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(objectives.TABLE, "toy_alignment", _toy_spec(aliases=("barlow",), objective="toy_alignment"))
        with pytest.raises(ValueError, match="alias 'barlow' names two losses"):
            losses.get("mse")
    clash = objectives.Hyper("temperature", 0.5, lambda f, v: None, "another temperature")
    monkeypatch.setitem(objectives.TABLE, "toy_alignment", _toy_spec(hypers=(_weight_hyper(), clash)))
    with pytest.raises(ValueError, match="'temperature': specs of TABLE give it two definitions"):
        objectives.make_objective("simclr", *_models()[:2])
