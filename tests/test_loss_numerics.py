"""Numerical edge cases of the losses and of ``ssl_geometry.ops``, over the loss registry.

Each case has the behaviour a user would expect: the right number at extreme scales, half
precision computed in float32, and a loud error (also under ``jit``) where no right number exists.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from test_losses import CASES, loss_inputs, np_unit, np_wmse

from ssl_geometry import losses as L
from ssl_geometry import ops

NAMES = list(L.REGISTRY)


def _call(name, args):
    return CASES[name][0](list(args))


def _scaled(name, scale, dtype):
    """Inputs of ``name`` with every *embedding* argument times ``scale`` (MoCo's unit queue kept)."""
    args = loss_inputs(name)
    spec = L.REGISTRY[name]
    keep = {"queue", "center"}
    return [jnp.asarray(a if spec.args[i] in keep else a * scale, dtype) for i, a in enumerate(args)]


# ----------------------------------------------------------------------------- registry metadata


def test_registry_and_reference_cases_agree():
    """Every registered loss has a NumPy reference case here, with the same gradient pattern."""
    assert set(CASES) == set(L.REGISTRY) == set(L.LOSSES) == set(L.NEEDS_BATCH)
    for name, spec in L.REGISTRY.items():
        assert (CASES[name][2], CASES[name][3]) == (spec.differentiable, spec.stop_gradient), name
        assert L.get(name) is spec.fn and L.spec(name) is spec
        out = spec.fn(*map(jnp.asarray, loss_inputs(name)))
        assert isinstance(out, tuple) == spec.stateful, name


@pytest.mark.parametrize("name", NAMES)
def test_hessian_psd_flag(name):
    """``hessian_psd`` is True exactly for the losses whose H_L has no negative eigenvalue."""
    spec = L.REGISTRY[name]
    fn = CASES[name][0]
    shapes = [np.shape(loss_inputs(name)[i]) for i in spec.differentiable]
    cuts = np.cumsum([int(np.prod(s)) for s in shapes])[:-1]

    def flat_loss(theta, args):
        a = list(args)
        for i, p, s in zip(spec.differentiable, jnp.split(theta, cuts), shapes):
            a[i] = p.reshape(s)
        return fn(a)

    hess = jax.jit(jax.hessian(flat_loss))  # one compilation for all seeds
    lowest = []
    for seed in range(3):
        args = [jnp.asarray(a) for a in loss_inputs(name, seed=seed)]
        theta = jnp.concatenate([args[i].ravel() for i in spec.differentiable])
        lowest.append(float(np.linalg.eigvalsh(np.asarray(hess(theta, args)))[0]))
    if spec.hessian_psd:
        assert min(lowest) > -1e-9, (name, lowest)
    else:
        assert min(lowest) < -1e-6, (name, lowest)


# ----------------------------------------------------------------------------- extreme scales


@pytest.mark.parametrize("name", NAMES)
def test_extreme_input_scale(name):
    """float32 inputs at scale 1e30: scale-invariant losses give the scale-1 value; polynomial ones
    raise a FloatingPointError naming the documented limit (and are finite in float64)."""
    spec = L.REGISTRY[name]
    big = _scaled(name, 1e30, jnp.float32)
    if spec.degree == 0:
        ref = float(_call(name, _scaled(name, 1.0, jnp.float32)))
        val = float(_call(name, big))
        np.testing.assert_allclose(val, ref, rtol=2e-4, atol=1e-6)
        np.testing.assert_allclose(float(jax.jit(lambda *a: _call(name, a))(*big)), ref, rtol=2e-4, atol=1e-6)
    elif spec.degree is None:
        assert np.isfinite(float(_call(name, big)))
    else:
        with pytest.raises(
            FloatingPointError, match=rf"`{name}` loss is not finite.*\^{spec.degree}.*documented limit"
        ):
            _call(name, big)
        with pytest.raises(RuntimeError, match=f"`{name}` loss is not finite"):
            jax.jit(lambda *a: _call(name, a))(*big)
        assert np.isfinite(float(_call(name, _scaled(name, 1e30, jnp.float64))))


def test_issue_13_scale_cases_give_the_right_numbers():
    """The reported cases: simsiam -1 (not -0.0); info_nce, barlow_twins as at scale 1."""
    u = jnp.asarray(np.random.default_rng(0).normal(size=(6, 4)) * 1e30, jnp.float32)
    assert float(L.simsiam(u, u, u, u)) == pytest.approx(-1.0, abs=1e-6)
    z1, z2 = (jnp.asarray(a * 1e30, jnp.float32) for a in loss_inputs("info_nce"))
    for fn in (L.info_nce, L.barlow_twins):
        ref = float(fn(z1 / 1e30, z2 / 1e30))
        assert float(fn(z1, z2)) == pytest.approx(ref, rel=2e-4)


# ----------------------------------------------------------------------------- half precision


@pytest.mark.parametrize("dtype", [jnp.float16, jnp.bfloat16])
@pytest.mark.parametrize("name", NAMES)
def test_half_precision_is_computed_in_float32(name, dtype):
    args = [jnp.asarray(a, dtype) for a in loss_inputs(name)]
    out = L.REGISTRY[name].fn(*args)
    loss = out[0] if isinstance(out, tuple) else out
    assert loss.dtype == jnp.float32, loss.dtype
    ref = _call(name, [a.astype(jnp.float32) for a in args])
    np.testing.assert_allclose(float(loss), float(ref), rtol=1e-6, atol=1e-7)
    if isinstance(out, tuple):
        assert out[1].dtype == dtype  # state keeps the dtype it came in
    if dtype != jnp.float16:
        return
    g = jax.grad(lambda a: _call(name, [a] + args[1:]))(args[0])
    assert g.dtype == dtype and bool(jnp.all(jnp.isfinite(g.astype(jnp.float32))))


def test_float16_at_large_scale_does_not_overflow():
    """|x|^2 of a float16 vector of size 300 is 9e4 > 65504: still a unit vector and cos = 1."""
    u = jnp.full((4, 3), 300.0, jnp.float16)
    assert float(L.simsiam(u, u, u, u)) == pytest.approx(-1.0, abs=1e-6)
    n = ops.l2_normalize(u, 1e-8)
    assert n.dtype == jnp.float16
    np.testing.assert_allclose(np.asarray(n, np.float32), np.full((4, 3), 1 / np.sqrt(3)), rtol=1e-3)


# ----------------------------------------------------------------------------- checks inside jit


TRACED_BAD = [
    ("info_nce", dict(temperature=-0.1), "temperature"),
    ("info_nce", dict(temperature=0.0), "temperature"),
    ("info_nce_one_way", dict(temperature=-0.1), "temperature"),
    ("moco", dict(temperature=-1.0), "temperature"),
    ("moco_v3", dict(temperature=float("nan")), "temperature"),
    ("barlow_twins", dict(eps=-1.0), "eps"),
    ("barlow_twins", dict(lambd=-1.0), "lambd"),
    ("vicreg", dict(eps=-1.0), "eps"),
    ("vicreg", dict(std_coeff=-1.0), "std_coeff"),
    ("wmse", dict(eps=1.5), "eps"),
    ("dino", dict(student_temp=0.0), "student_temp"),
    ("dino", dict(center_momentum=2.0), "center_momentum"),
]


@pytest.mark.parametrize("name, kwargs, arg", TRACED_BAD)
def test_traced_hyper_parameter_out_of_range_fails_under_jit(name, kwargs, arg):
    fn = L.get(name)
    args = [jnp.asarray(a) for a in loss_inputs(name)]
    with pytest.raises(ValueError, match=arg):  # eager: the usual ValueError
        fn(*args, **kwargs)
    with pytest.raises(RuntimeError, match=f"`{arg}` must"):  # traced: a run-time error, not a number
        jax.jit(fn)(*args, **{k: jnp.asarray(v) for k, v in kwargs.items()})


def test_traced_valid_hyper_parameters_give_the_eager_value():
    args = [jnp.asarray(a) for a in loss_inputs("info_nce")]
    eager = float(L.info_nce(*args, temperature=0.3))
    assert float(jax.jit(L.info_nce)(*args, temperature=jnp.asarray(0.3))) == pytest.approx(eager, rel=1e-12)
    t = {"w": jnp.array(1.0)}
    with pytest.raises(RuntimeError, match="`decay` must lie in"):
        jax.jit(L.ema_update)(t, t, jnp.asarray(1.5))
    assert float(jax.jit(L.ema_update)(t, {"w": jnp.array(3.0)}, jnp.asarray(0.75))["w"]) == 1.5


def test_nan_inputs_propagate_under_jit_for_the_training_loop_to_report():
    a = jnp.asarray(np.random.default_rng(0).normal(size=(4, 3)))
    b = a.at[1, 2].set(jnp.nan)
    assert not bool(jnp.isfinite(jax.jit(L.vicreg)(a, b)))


# ----------------------------------------------------------------------------- W-MSE definition


def test_wmse_whitens_each_view_separately_against_numpy():
    """Ermolov et al.'s reference whitens each view's batch with its own mean and covariance.

    Checked against an independent NumPy computation of both readings: the per-view one matches
    ``losses.wmse``, the pooled one (one covariance over both views' 2n rows) does not.
    """
    rng = np.random.default_rng(7)
    z1 = rng.normal(size=(12, 3)) @ np.diag([1.0, 3.0, 0.5])
    z2 = z1 @ rng.normal(size=(3, 3)) + 0.3 * rng.normal(size=(12, 3)) + 2.0
    got = float(L.wmse(jnp.asarray(z1), jnp.asarray(z2)))
    assert got == pytest.approx(np_wmse(z1, z2), rel=1e-10)

    both = np.concatenate([z1, z2])
    chol = np.linalg.cholesky(np.cov(both, rowvar=False))
    w = (both - both.mean(0)) @ np.linalg.inv(chol).T
    w1, w2 = np_unit(w[:12], 1e-12), np_unit(w[12:], 1e-12)
    pooled = np.mean(np.sum((w1 - w2) ** 2, axis=1))
    assert abs(got - pooled) > 1e-2
    for z in (z1, z2):  # each whitened view has identity covariance
        wz = np.asarray(L.cholesky_whiten(jnp.asarray(z)))
        np.testing.assert_allclose(np.cov(wz, rowvar=False), np.eye(3), atol=1e-10)


def test_cholesky_whiten_is_scale_safe():
    z = np.random.default_rng(8).normal(size=(10, 3))
    ref = np.asarray(L.cholesky_whiten(jnp.asarray(z, jnp.float32), 1e-3))
    # S_eps = (1 - eps) S + eps I is not scale-invariant, so compare with the float64 reference
    big = np.asarray(L.cholesky_whiten(jnp.asarray(z * 1e30, jnp.float32), 0.0))
    np.testing.assert_allclose(big, np.asarray(L.cholesky_whiten(jnp.asarray(z), 0.0)), rtol=1e-4, atol=1e-5)
    assert np.all(np.isfinite(ref))


# ----------------------------------------------------------------------------- ops


@pytest.mark.parametrize("scale", [1e-30, 1e-13, 1.0, 1e20, 1e36])
def test_l2_normalize_matches_numpy_at_every_scale(scale):
    x = np.random.default_rng(0).normal(size=(5, 4)) * scale
    x[2] = 0.0
    for eps in (1e-12, 1e-8):
        want = np.stack([r / max(np.linalg.norm(r), eps) for r in x])
        got = ops.l2_normalize(jnp.asarray(x, jnp.float32), eps)
        np.testing.assert_allclose(np.asarray(got), want, rtol=2e-6, atol=1e-30)


def test_l2_normalize_gradient_is_exact_and_finite_at_zero():
    x = jnp.asarray(np.random.default_rng(1).normal(size=(4,)))
    jac = jax.jacobian(lambda v: ops.l2_normalize(v, 1e-12))(x)
    n = float(jnp.linalg.norm(x))
    np.testing.assert_allclose(jac, (np.eye(4) - np.outer(x, x) / n**2) / n, rtol=1e-12)
    jac0 = jax.jacobian(lambda v: ops.l2_normalize(v, 1e-6))(jnp.zeros(3))
    np.testing.assert_allclose(jac0, np.eye(3) / 1e-6)


def test_compute_dtype():
    assert ops.compute_dtype(jnp.ones(2, jnp.bfloat16)) == jnp.float32
    assert ops.compute_dtype(jnp.ones(2, jnp.float16), jnp.ones(2, jnp.float64)) == jnp.float64
    assert ops.compute_dtype(jnp.ones(2, jnp.int32)) == jnp.float32
