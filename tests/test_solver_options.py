"""``curvature.SolverOptions`` (one frozen value for how a Lanczos run stops) and the one convention for extra
arguments, ``args=()`` passed on as ``f(x, *args)`` (docs/architecture.md, "Extra arguments and solver options")."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssl_geometry import curvature as cv
from ssl_geometry import geometry, losses

SolverOptions = cv.SolverOptions


# ----------------------------------------------------------------------------- the value itself


@pytest.mark.parametrize(
    "field, value, expected",
    [
        ("tol", 0.0, "`SolverOptions.tol` must be None or a finite float > 0; got 0.0"),
        ("tol", float("nan"), "`SolverOptions.tol` must be None or a finite float > 0; got nan"),
        ("tol", "1e-6", "`SolverOptions.tol` must be None or a finite float > 0; got '1e-6'"),
        ("num_steps", 0, "`SolverOptions.num_steps` must be an integer >= 1; got 0"),
        ("num_steps", 2.0, "`SolverOptions.num_steps` must be an integer >= 1; got 2.0"),
        ("check_every", True, "`SolverOptions.check_every` must be an integer >= 1; got True"),
        ("error_bound", "kato", "`SolverOptions.error_bound` must be None or one of ['residual', 'gap']; got 'kato'"),
        ("early_stop", 1, "`SolverOptions.early_stop` must be None or a bool; got 1"),
        ("breakdown_tol", -1e-12, "`SolverOptions.breakdown_tol` must be None or a finite float > 0; got -1e-12"),
        ("symmetry_tol", float("inf"), "`SolverOptions.symmetry_tol` must be None or a finite float > 0; got inf"),
        ("device_loop", "yes", "`SolverOptions.device_loop` must be None or a bool; got 'yes'"),
    ],
)
def test_a_bad_field_is_refused_by_its_name(field, value, expected):
    with pytest.raises(ValueError) as err:
        SolverOptions(**{field: value})
    assert str(err.value).startswith(expected)
    with pytest.raises(ValueError, match=f"`SolverOptions.{field}`"):  # replace checks like a new value
        SolverOptions().replace(**{field: value})


def test_options_are_frozen_hashable_and_resolve_against_a_functions_defaults():
    o = SolverOptions(tol=1e-3, num_steps=np.int64(7))
    assert o == SolverOptions(tol=0.001, num_steps=7) and hash(o) == hash(SolverOptions(tol=0.001, num_steps=7))
    assert type(o.num_steps) is int and type(o.tol) is float
    with pytest.raises(dataclasses.FrozenInstanceError):
        o.tol = 1e-4  # type: ignore[misc]
    with pytest.raises(TypeError):
        o.replace(max_steps=3)
    d = o.with_defaults(SolverOptions(tol=1e-6, check_every=4, error_bound="gap"))
    assert (d.tol, d.num_steps, d.check_every, d.error_bound, d.early_stop) == (1e-3, 7, 4, "gap", None)
    # a static argument of jit: equal values share one compilation
    traces = []

    def scale(x, opts):
        traces.append(opts)
        return x * opts.check_every

    f = jax.jit(scale, static_argnums=1)
    assert float(f(1.0, SolverOptions(check_every=3))) == 3.0 == float(f(2.0, SolverOptions(check_every=3)) / 2)
    assert len(traces) == 1


def test_options_of_another_type_and_the_old_keywords_are_refused(no_shape_checks):
    """The library's own errors (the runtime type checks of the test suite, off here, would refuse first)."""
    A = jnp.diag(jnp.arange(1.0, 6.0))
    mv = lambda v, a: a @ v
    with pytest.raises(TypeError, match="`options` must be a SolverOptions"):
        cv.extreme_eigenvalues(mv, 5, args=(A,), options={"tol": 1e-6})
    with pytest.raises(TypeError, match="`options` must be a SolverOptions"):
        cv.hessian_extremes(lambda z: jnp.sum(z**2), jnp.ones(3), options=None)
    with pytest.raises(TypeError, match="tol"):
        cv.extreme_eigenvalues(mv, 5, args=(A,), tol=1e-6)  # type: ignore[call-arg]


# ----------------------------------------------------------------------------- defaults are the old behaviour


def _same(a, b):
    """Bit-for-bit equality of two results' arrays and scalars."""
    for f in ("smallest", "largest", "smallest_residuals", "largest_residuals", "num_steps", "converged", "tol"):
        x, y = np.asarray(getattr(a, f)), np.asarray(getattr(b, f))
        assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), f


def _spd(n, seed):
    rng = np.random.default_rng(seed)
    Q = np.linalg.qr(rng.standard_normal((n, n)))[0]
    return jnp.asarray(Q @ np.diag(np.linspace(-2.0, 3.0, n) ** 3) @ Q.T)


def test_no_options_equals_every_functions_old_defaults_written_out():
    A, key = _spd(40, 0), jax.random.PRNGKey(1)
    mv = lambda v, a: a @ v
    old = SolverOptions(tol=None, num_steps=None, check_every=20, error_bound="residual", early_stop=True)
    _same(
        cv.extreme_eigenvalues(mv, 40, args=(A,), key=key),
        cv.extreme_eigenvalues(mv, 40, args=(A,), key=key, options=old),
    )
    B = jnp.stack([_spd(6, s) for s in range(3)])
    bmv = lambda V, b: jnp.einsum("bij,bj->bi", b, V)
    _same(
        cv.blockwise_extreme_eigenvalues(bmv, 3, 6, args=(B,), key=key),
        cv.blockwise_extreme_eigenvalues(bmv, 3, 6, args=(B,), key=key, options=old),
    )
    W = jnp.asarray(np.random.default_rng(2).standard_normal((3, 3)))
    loss = lambda z, W: jnp.sum(jnp.tanh(z @ W) ** 2) + 0.1 * jnp.sum(z**4)
    x = jnp.asarray(np.random.default_rng(3).standard_normal((5, 3)))
    h_default = cv.hessian_extremes(loss, x, args=(W,), key=key)
    _same(h_default, cv.hessian_extremes(loss, x, args=(W,), key=key, options=old.replace(check_every=4)))
    # the fields are read: a check after every step, or a budget that stops the full run short
    full = cv.hessian_extremes(loss, x, args=(W,), key=key, method="full")
    each = cv.hessian_extremes(loss, x, args=(W,), key=key, method="full", options=SolverOptions(check_every=1))
    short = cv.hessian_extremes(loss, x, args=(W,), key=key, method="full", options=SolverOptions(num_steps=5))
    assert full.converged and full.num_steps > 6 and full.lanczos.num_checks < full.num_steps
    assert each.lanczos.num_checks == each.num_steps and short.num_steps == 5 and not short.converged
    fn = lambda v: jnp.tanh(v @ W).reshape(-1)
    big = jnp.asarray(np.random.default_rng(4).standard_normal((30, 3)))
    norm_old = SolverOptions(tol=1e-6, num_steps=200, check_every=4, error_bound="gap")
    a = cv.operator_norm(fn, big, max_dense_entries=1)
    assert a == cv.operator_norm(fn, big, max_dense_entries=1, options=norm_old)
    assert a != cv.operator_norm(fn, big, max_dense_entries=1, options=SolverOptions(num_steps=2, tol=0.5))
    tgt = jnp.asarray(np.random.default_rng(5).standard_normal((5, 3)))
    head, lf = (lambda z: jnp.tanh(z @ W)), (lambda u: losses.negative_cosine(u, tgt))
    s0 = geometry.collapse_spectrum(head, lf, x, max_dense_dim=1)
    s1 = geometry.collapse_spectrum(head, lf, x, max_dense_dim=1, options=old.replace(num_steps=100))
    s2 = geometry.collapse_spectrum(head, lf, x, max_dense_dim=1, options=SolverOptions(num_steps=3))
    assert s0.lambda_min == s1.lambda_min and s0.residual_norms == s1.residual_norms
    assert {r["num_steps"] for r in s2.residual_norms.values()} == {3}


def test_collapse_spectrum_solves_the_parts_asked_for_each_with_its_own_options():
    """A part alone gives the numbers it gives beside the others (its Lanczos key is fixed by its place in
    SPECTRUM_PARTS), a mapping sets each part's budget, and a bad ``parts`` or ``options`` is refused by name."""
    rng = np.random.default_rng(2)
    x, W = jnp.asarray(rng.standard_normal((5, 3))), jnp.asarray(rng.standard_normal((3, 3)))
    tgt = jnp.asarray(rng.standard_normal((5, 3)))
    head, lf = (lambda z: jnp.tanh(z @ W)), (lambda u: losses.negative_cosine(u, tgt))
    every = geometry.collapse_spectrum(head, lf, x, max_dense_dim=1, options=SolverOptions(num_steps=9))
    assert geometry.SPECTRUM_PARTS == ("full", "metric", "interaction") == tuple(every.lambda_min)
    for part in geometry.SPECTRUM_PARTS:
        alone = geometry.collapse_spectrum(
            head, lf, x, max_dense_dim=1, options=SolverOptions(num_steps=9), parts=[part]
        )
        assert alone.lambda_min == {part: every.lambda_min[part]} and alone.sign_tol == {part: every.sign_tol[part]}
    mixed = geometry.collapse_spectrum(
        head, lf, x, max_dense_dim=1, parts=("interaction", "full"), options={"full": SolverOptions(num_steps=9)}
    )
    assert tuple(mixed.lambda_min) == ("full", "interaction") and mixed.lambda_min["full"] == every.lambda_min["full"]
    assert mixed.residual_norms["full"]["num_steps"] == 9 and mixed.residual_norms["interaction"]["num_steps"] == 15
    dense = geometry.collapse_spectrum(head, lf, x, parts=("metric",))
    assert dense.method == "dense" and tuple(dense.lambda_min) == ("metric",)
    for bad in ((), ("full", "full"), ("hessian",)):
        with pytest.raises(ValueError, match="`parts` must be a non-empty subset"):
            geometry.collapse_spectrum(head, lf, x, parts=bad)
    with pytest.raises(ValueError, match="`options` names parts that are not solved: \\['metric'\\]"):
        geometry.collapse_spectrum(head, lf, x, parts=("full",), options={"metric": SolverOptions()})
    with pytest.raises(TypeError, match="options"):  # the runtime type check, or checked_options without it
        geometry.collapse_spectrum(head, lf, x, options={"full": 100})


# ----------------------------------------------------------------------------- one convention for extra arguments


def test_every_converted_function_takes_args_as_a_keyword_tuple():
    rng = np.random.default_rng(6)
    x = jnp.asarray(rng.standard_normal((4, 3)))
    W, c = jnp.asarray(rng.standard_normal((3, 3))), jnp.asarray(0.7)
    f = lambda z, W, c: c * jnp.sum(jnp.tanh(z @ W) ** 2) + jnp.sum(jnp.mean(z, axis=0) ** 2)
    closed = lambda z: f(z, W, c)
    args = (W, c)
    H = np.asarray(jax.hessian(closed)(x)).reshape(12, 12)
    np.testing.assert_allclose(cv.hessian(f, x, args=args), H, rtol=1e-12, atol=1e-14)
    v = jnp.asarray(rng.standard_normal((4, 3)))
    np.testing.assert_allclose(cv.hvp(f, x, v, args=args), (H @ v.reshape(-1)).reshape(4, 3), rtol=1e-11)
    np.testing.assert_allclose(cv.linearized_hvp(f, x, args=args)(v), (H @ v.reshape(-1)).reshape(4, 3), rtol=1e-11)
    per = lambda z, W, c: c * jnp.sum(jnp.tanh(z @ W) ** 2)  # block-diagonal over the rows
    blocks = np.asarray(cv.block_diagonal_hessian(per, x, args=args))
    Hp = np.asarray(jax.hessian(lambda z: per(z, W, c))(x)).reshape(4, 3, 4, 3)
    np.testing.assert_allclose(blocks[2], Hp[2, :, 2, :], rtol=1e-11, atol=1e-14)
    assert cv.block_coupling(per, x, args=args) == 0.0 and cv.block_coupling(f, x, args=args) > 1e-3
    ev = np.linalg.eigvalsh(H)
    r = cv.hessian_extremes(f, x, args=args, options=SolverOptions(tol=1e-10))
    assert r.method == "full" and abs(r.smallest[0] - ev[0]) <= 1e-8 * abs(ev).max()
    assert abs(r.largest[0] - ev[-1]) <= 1e-8 * abs(ev).max()
    e = cv.extreme_eigenvalues(lambda u, A: A @ u, 12, args=[jnp.asarray(H)])  # a list is a tuple of arguments
    np.testing.assert_allclose([e.smallest[0], e.largest[0]], [ev[0], ev[-1]], rtol=1e-8)


@pytest.mark.parametrize("name", ["hessian", "linearized_hvp", "block_diagonal_hessian", "hessian_extremes"])
def test_a_lone_array_for_args_is_refused_by_name(name, no_shape_checks):
    """A lone array would be unpacked into its rows: ``f(x, *W)`` with three rows is not ``f(x, W)``."""
    x, W = jnp.ones((2, 3)), jnp.eye(3)
    with pytest.raises(TypeError, match=r"`args` must be a tuple of the extra arguments, passed as f\(x, \*args\)"):
        getattr(cv, name)(lambda z, W: jnp.sum((z @ W) ** 2), x, args=W)
    with pytest.raises(TypeError, match="`args` must be a tuple"):
        cv.extreme_eigenvalues(lambda v, A: A @ v, 3, args=W)
