"""The one optimisation loop (ssl_geometry.fit) and the dynamics entry points that share it."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import ssl_geometry
from ssl_geometry import dynamics


def quad(p, b, args):
    """0.5 |p - b|^2: one step of SGD(lr) moves p to p - lr (p - b)."""
    return 0.5 * jnp.sum((p - b) ** 2)


def test_fit_matches_closed_form_sgd_with_per_step_batches():
    lr, steps = 0.3, 6
    b = jnp.arange(steps, dtype=jnp.float64)[:, None] * jnp.ones((steps, 2))
    r = ssl_geometry.fit(quad, jnp.zeros(2), optax.sgd(lr), steps=steps, batches=b, chunk=3)
    p, losses = np.zeros(2), []
    for k in range(steps):
        losses.append(0.5 * np.sum((p - np.asarray(b[k])) ** 2))
        p = p - lr * (p - np.asarray(b[k]))
    np.testing.assert_allclose(r.params, p, rtol=1e-14)
    np.testing.assert_allclose(r.losses, losses, rtol=1e-14)
    assert r.ok and r.n_steps == steps and r.first_bad_step is None


def test_fit_reports_first_non_finite_step_and_freezes_params():
    # the loss turns non-finite once p[0] > 1.5 (log of a negative number); p grows by 1 per step
    loss = lambda p, b, a: jnp.log(2.0 - p[0]) * 0.0 - p[0]
    with pytest.raises(ssl_geometry.FitError, match="step 2 of 5") as e:
        ssl_geometry.fit(loss, jnp.zeros(1), optax.sgd(1.0), steps=5)
    r = e.value.result
    assert r.first_bad_step == 2 and r.n_steps == 2 and not r.ok
    np.testing.assert_allclose(r.params, [2.0])  # params after steps 0 and 1, not after the bad one
    assert np.isfinite(r.losses[:2]).all() and np.isnan(r.losses[2:]).all()
    r2 = ssl_geometry.fit(loss, jnp.zeros(1), optax.sgd(1.0), steps=5, throw=False)
    assert r2.first_bad_step == 2


def test_fit_stateful_loss_and_observe():
    def loss(p, s, b, a):
        assert b is None  # no batches: the data comes as args
        return 0.5 * jnp.sum((p - a) ** 2), s + 1.0

    r = ssl_geometry.fit(
        loss,
        jnp.zeros(1),
        optax.sgd(0.5),
        steps=4,
        args=jnp.ones(1),
        state=jnp.zeros(()),
        chunk=2,
        observe=lambda p, k, a: p[0] + 0.0 * a[0],
    )
    assert float(r.state) == 4.0
    np.testing.assert_allclose(r.observed, [0.0, 0.75, 0.9375])  # k = 0, 2, 4


def test_fit_bad_arguments_name_the_argument():
    with pytest.raises(TypeError, match="optimizer"):
        ssl_geometry.fit(quad, jnp.zeros(1), lambda g: g, steps=2)
    with pytest.raises(ValueError, match="steps"):
        ssl_geometry.fit(quad, jnp.zeros(1), optax.sgd(0.1), steps=0)
    with pytest.raises(ValueError, match="multiple of `chunk`"):
        ssl_geometry.fit(quad, jnp.zeros(1), optax.sgd(0.1), steps=5, chunk=2)
    with pytest.raises(ValueError, match="leading axis `steps`=3"):
        ssl_geometry.fit(quad, jnp.zeros(1), optax.sgd(0.1), steps=3, batches=jnp.zeros((4, 1)))


def test_fit_and_dynamics_compile_once_for_new_arrays_of_the_same_shape():
    """The docstrings promise one compiled program per static configuration: count traces of the loss
    (a Python side effect runs only while JAX traces) across calls with new arrays of the same shape."""
    traces = {"fit": 0, "discrete": 0, "flow": 0}

    def counting(name):
        def loss(p, b, a):
            traces[name] += 1
            return 0.5 * jnp.sum((p - a) ** 2)

        return loss

    losses_ = {k: counting(k) for k in traces}
    opt = optax.sgd(0.1)
    obs = lambda p, t, a: p[0]
    key = jax.random.PRNGKey(0)
    for i in range(4):
        x0, b = jax.random.normal(jax.random.fold_in(key, i), (2, 3), jnp.float64)
        ssl_geometry.fit(losses_["fit"], x0, opt, steps=4, args=b)
        dynamics.discrete(losses_["discrete"], x0, opt, steps=4, args=b, observe=obs, observe_every=2, lr=0.1)
        dynamics.gradient_flow(losses_["flow"], x0, t1=1.0, save_at=jnp.array([0.0, 1.0]), args=b, observe=obs)
        if i == 0:
            first = dict(traces)
    assert traces == first and all(v > 0 for v in first.values()), (first, traces)
    # a new shape is a new program: the counter moves
    ssl_geometry.fit(losses_["fit"], jnp.zeros(5), opt, steps=4, args=jnp.ones(5))
    assert traces["fit"] > first["fit"]


def test_gradient_flow_non_finite_final_loss_is_a_failure():
    # params stay finite (the gradient is 0) but the loss is NaN: must not be reported "successful"
    loss = lambda p, b, a: jnp.sum(p * 0.0) + jnp.log(-1.0)
    with pytest.raises(dynamics.DynamicsError, match="non-finite"):
        dynamics.gradient_flow(loss, jnp.ones(2), t1=1.0, save_at=jnp.array([1.0]))
    tr = dynamics.gradient_flow(loss, jnp.ones(2), t1=1.0, save_at=jnp.array([1.0]), max_steps=50, throw=False)
    assert not tr.ok  # a flagged failure (the infinite gradient stalls the step controller), not an exception


def test_host_loop_mode_gives_the_same_numbers_as_scan():
    """``scan=False`` (one jitted step per step, for conv nets on XLA:CPU) is the same computation."""

    def loss(p, s, b, a):
        return 0.5 * jnp.sum((p - b) ** 2) + jnp.sum(p**4), s + jnp.sum(p)

    b = jax.random.normal(jax.random.PRNGKey(3), (6, 3), jnp.float64)
    kw = dict(steps=6, batches=b, state=jnp.zeros(()), chunk=2, observe=lambda p, k, a: p[0])
    a = ssl_geometry.fit(loss, jnp.ones(3), optax.adam(0.1), **kw)
    h = ssl_geometry.fit(loss, jnp.ones(3), optax.adam(0.1), scan=False, **kw)
    np.testing.assert_allclose(h.params, a.params, rtol=1e-13)
    np.testing.assert_allclose(h.losses, a.losses, rtol=1e-13)
    np.testing.assert_allclose(h.observed, a.observed, rtol=1e-13)
    np.testing.assert_allclose(h.state, a.state, rtol=1e-13)
    bad = ssl_geometry.fit(
        lambda p, b, a: -p[0] + 0.0 * jnp.log(2.0 - p[0]),
        jnp.zeros(1),
        optax.sgd(1.0),
        steps=5,
        scan=False,
        throw=False,
    )
    assert bad.first_bad_step == 2 and np.isnan(bad.losses[2:]).all()


def test_a_loss_that_overflows_is_the_loops_reported_step_not_an_exception():
    """Losses raise on a non-finite value from finite inputs (equinox.error_if under jit); inside the
    library's loops the same overflow is reported as the first non-finite step instead."""
    from ssl_geometry import losses

    target = jnp.zeros((1, 2))
    loss = lambda p, b, a: losses.mse(p[None, :] * 1e160, target)  # (1e160)^2 overflows float64
    with pytest.raises(Exception, match="not finite although its inputs are finite"):
        jax.block_until_ready(jax.jit(loss)(jnp.ones(2), None, None))
    for scan in (True, False):
        r = ssl_geometry.fit(loss, jnp.ones(2), optax.sgd(1e-3), steps=3, scan=scan, throw=False)
        assert r.first_bad_step == 0 and np.isnan(r.losses).all()
    tr = dynamics.gradient_flow(loss, jnp.ones(2), t1=1.0, save_at=jnp.array([1.0]), max_steps=50, throw=False)
    assert not tr.ok  # a flagged failure (the infinite gradient stalls the step controller), not an exception


def test_one_signature_batch_and_args_reach_the_loss_and_observe():
    """``loss(params, batch, args)`` gets the step's batch and the shared args together (and ``None`` for
    what is not given); ``observe(params, k, args)`` gets the args; the dynamics pass the same."""
    seen = []

    def loss(p, b, a):
        seen.append((b is None, a is None))
        return 0.5 * jnp.sum((p - b - a) ** 2)

    lr, steps = 0.5, 4
    b = jnp.arange(steps, dtype=jnp.float64)[:, None] * jnp.ones((steps, 2))
    a = jnp.full(2, 10.0)
    r = ssl_geometry.fit(
        loss,
        jnp.zeros(2),
        optax.sgd(lr),
        steps=steps,
        batches=b,
        args=a,
        chunk=2,
        observe=lambda p, k, args: jnp.sum(p) + 0.0 * jnp.sum(args),
    )
    p = np.zeros(2)
    for k in range(steps):
        p = p - lr * (p - np.asarray(b[k]) - 10.0)
    np.testing.assert_allclose(r.params, p, rtol=1e-14)
    assert set(seen) == {(False, False)}  # every trace got both
    none = ssl_geometry.fit(
        lambda p, b, a: (b, a) == (None, None) and 0.5 * jnp.sum(p**2), jnp.ones(1), optax.sgd(0.5), steps=2
    )
    np.testing.assert_allclose(none.params, [0.25])
    with pytest.raises(TypeError):
        ssl_geometry.fit(lambda p: jnp.sum(p**2), jnp.ones(1), optax.sgd(0.5), steps=2)  # no arity switching
    with pytest.raises(TypeError, match="observe_args"):
        ssl_geometry.fit(quad, jnp.zeros(1), optax.sgd(0.1), steps=2, args=jnp.ones(1), observe_args=True)
    # the flow and the optimiser take the same full-batch loss and observe (batch None, data in args)
    full = lambda p, b, a: 0.5 * jnp.sum((p - a) ** 2) + (0.0 if b is None else jnp.nan)
    obs = lambda p, t, a: p[0] - a[0]
    gd = dynamics.discrete(full, jnp.zeros(2), optax.sgd(0.1), steps=10, args=a, lr=0.1, observe=obs, observe_every=10)
    fl = dynamics.gradient_flow(
        full, jnp.zeros(2), t1=1.0, save_at=jnp.array([0.0, 1.0]), args=a, observe=obs, rtol=1e-10, atol=1e-12
    )
    np.testing.assert_allclose(gd.observed, [-10.0, -10.0 * 0.9**10], rtol=1e-12)
    np.testing.assert_allclose(fl.observed, [-10.0, -10.0 * np.exp(-1.0)], rtol=1e-8)
    assert float(dynamics.sharpness(full, gd.params, a)) == pytest.approx(1.0, abs=1e-12)


def test_a_loss_or_observe_of_the_wrong_arity_is_refused_naming_the_signature():
    """``fit`` reads the loss's signature before tracing: a one- or two-argument loss, a stateless loss given
    a ``state``, or a two-argument ``observe`` is a ``TypeError`` that names the expected signature and the
    function's own, not JAX's ``<lambda>() takes 1 positional argument but 3 were given``."""
    p, sgd = jnp.ones(2), optax.sgd(0.5)
    expected = r"`loss_fn` must be loss_fn\(params, batch, args\) -> scalar"
    with pytest.raises(TypeError, match=expected + r".*got <lambda>\(p\): too many positional arguments"):
        ssl_geometry.fit(lambda p: jnp.sum(p**2), p, sgd, steps=2)
    with pytest.raises(TypeError, match=expected + r".*got <lambda>\(p, batch\)"):
        ssl_geometry.fit(lambda p, batch: jnp.sum(p**2), p, sgd, steps=2)
    with pytest.raises(TypeError, match=r"loss_fn\(params, state, batch, args\) -> \(loss, new_state\)"):
        ssl_geometry.fit(lambda p, b, a: jnp.sum(p**2), p, sgd, steps=2, state=jnp.zeros(()))
    with pytest.raises(TypeError, match=r"`observe` must be observe\(params, k, args\)"):
        ssl_geometry.fit(lambda p, b, a: jnp.sum(p**2), p, sgd, steps=2, observe=lambda p, k: p)
    with pytest.raises(TypeError, match="`loss_fn` must be a function"):
        ssl_geometry.fit("quadratic", p, sgd, steps=2)
    # what binds runs: defaults, *args, a partial, a stateful loss with its state
    quad2 = lambda p, b, a, scale=1.0: 0.5 * scale * jnp.sum(p**2)
    for ok in (quad2, lambda *xs: 0.5 * jnp.sum(xs[0] ** 2), functools.partial(quad2, scale=1.0)):
        np.testing.assert_allclose(ssl_geometry.fit(ok, p, sgd, steps=2).params, [0.25, 0.25])
    st = ssl_geometry.fit(lambda p, s, b, a: (0.5 * jnp.sum(p**2), s + 1), p, sgd, steps=2, state=jnp.zeros(()))
    assert float(st.state) == 2.0


def test_a_loss_whose_signature_cannot_be_read_is_called_as_it_is():
    """No readable signature: no refusal up front; the call decides, as before the check (a right loss runs,
    a wrong one fails with Python's own error from the call)."""
    import inspect

    class Opaque:
        __signature__ = "unreadable"  # inspect.signature raises on it

        def __init__(self, takes_three):
            self.takes_three = takes_three

        def __call__(self, p, *rest):
            if not self.takes_three or len(rest) != 2:
                raise TypeError(f"Opaque loss called with {1 + len(rest)} arguments")
            return 0.5 * jnp.sum(p**2)

    with pytest.raises((TypeError, ValueError)):
        inspect.signature(Opaque(True))  # the premise
    r = ssl_geometry.fit(Opaque(True), jnp.ones(2), optax.sgd(0.5), steps=2)
    np.testing.assert_allclose(r.params, [0.25, 0.25])
    with pytest.raises(TypeError, match="Opaque loss called with 3 arguments"):
        ssl_geometry.fit(Opaque(False), jnp.ones(2), optax.sgd(0.5), steps=2)
