"""Backbones: parameter counts, shapes, BatchNorm state, jit/grad/jvp, and parity with PyTorch.

The PyTorch reference networks below are written here in the torchvision ResNet and DINO
ViT key layouts (torchvision cannot be installed next to torch 2.13 in this environment);
``tests/test_pretrained.py`` imports them too.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssl_geometry import backbones as B
from ssl_geometry import param_count

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional


# ----------------------------------------------------------------------------- torch references
class TorchBasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + idt)


class TorchBottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + idt)


class TorchResNet(nn.Module):
    """torchvision ``ResNet`` structure (``fc`` replaced by nothing), optional CIFAR stem."""

    def __init__(self, block, layers, cifar_stem=False):
        super().__init__()
        self.inplanes = 64
        self.cifar_stem = cifar_stem
        self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False) if cifar_stem else nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        for i, n in enumerate(layers):
            setattr(self, f"layer{i + 1}", self._make_layer(block, 64 * 2**i, n, 1 if i == 0 else 2))
        for m in self.modules():  # non-trivial BN statistics so that eval-mode parity means something
            if isinstance(m, nn.BatchNorm2d):
                with torch.no_grad():
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.2, 0.2)
                    m.running_mean.uniform_(-0.2, 0.2)
                    m.running_var.uniform_(0.5, 2.0)

    def _make_layer(self, block, planes, blocks, stride):
        down = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            down = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion, 1, stride, bias=False),
                nn.BatchNorm2d(planes * block.expansion),
            )
        mods = [block(self.inplanes, planes, stride, down)]
        self.inplanes = planes * block.expansion
        mods += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*mods)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        if not self.cifar_stem:
            x = self.maxpool(x)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return torch.flatten(F.adaptive_avg_pool2d(x, 1), 1)


def torch_resnet18_cifar():
    return TorchResNet(TorchBasicBlock, [2, 2, 2, 2], cifar_stem=True)


def torch_resnet50():
    return TorchResNet(TorchBottleneck, [3, 4, 6, 3])


class TorchAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=True)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = ((q @ k.transpose(-2, -1)) * (c // self.heads) ** -0.5).softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(b, n, c))


class TorchMlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class TorchBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = TorchAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = TorchMlp(dim, 4 * dim)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TorchPatchEmbed(nn.Module):
    def __init__(self, patch, dim):
        super().__init__()
        self.patch_size = patch
        self.proj = nn.Conv2d(3, dim, patch, patch)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


class TorchViT(nn.Module):
    """DINO ``VisionTransformer`` (``facebookresearch/dino`` ``vision_transformer.py``), no classifier."""

    def __init__(self, img_size=224, patch=16, dim=384, depth=12, heads=6):
        super().__init__()
        self.patch_embed = TorchPatchEmbed(patch, dim)
        n = (img_size // patch) ** 2
        self.cls_token = nn.Parameter(0.02 * torch.randn(1, 1, dim))
        self.pos_embed = nn.Parameter(0.02 * torch.randn(1, n + 1, dim))
        self.blocks = nn.ModuleList([TorchBlock(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        with torch.no_grad():  # non-trivial LayerNorm affine parameters
            for m in self.modules():
                if isinstance(m, nn.LayerNorm):
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.2, 0.2)

    def interpolate_pos_encoding(self, x, w, h):  # verbatim logic of DINO
        npatch = x.shape[1] - 1
        N = self.pos_embed.shape[1] - 1
        if npatch == N and w == h:
            return self.pos_embed
        class_pos_embed = self.pos_embed[:, 0]
        patch_pos_embed = self.pos_embed[:, 1:]
        dim = x.shape[-1]
        w0 = w // self.patch_embed.patch_size
        h0 = h // self.patch_embed.patch_size
        w0, h0 = w0 + 0.1, h0 + 0.1
        patch_pos_embed = F.interpolate(
            patch_pos_embed.reshape(1, int(math.sqrt(N)), int(math.sqrt(N)), dim).permute(0, 3, 1, 2),
            scale_factor=(w0 / math.sqrt(N), h0 / math.sqrt(N)),
            mode="bicubic",
        )
        assert int(w0) == patch_pos_embed.shape[-2] and int(h0) == patch_pos_embed.shape[-1]
        patch_pos_embed = patch_pos_embed.permute(0, 2, 3, 1).view(1, -1, dim)
        return torch.cat((class_pos_embed.unsqueeze(0), patch_pos_embed), dim=1)

    def forward(self, x):
        b, nc, w, h = x.shape
        t = self.patch_embed(x)
        t = torch.cat((self.cls_token.expand(b, -1, -1), t), dim=1)
        t = t + self.interpolate_pos_encoding(t, w, h)
        for blk in self.blocks:
            t = blk(t)
        return self.norm(t)[:, 0]


def state_numpy(module, prefix=""):
    return {prefix + k: v.detach().numpy() for k, v in module.state_dict().items()}


def torch_forward(model, x_nhwc, train=False):
    model.train(train)
    with torch.no_grad():
        return model(torch.from_numpy(np.ascontiguousarray(np.transpose(x_nhwc, (0, 3, 1, 2))))).numpy()


def rel_err(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def torch_count(m):
    return sum(p.numel() for p in m.parameters())


# ----------------------------------------------------------------------------- counts
@pytest.mark.parametrize(
    "factory,expected,torch_factory",
    [
        (B.resnet18_cifar, 11_168_832, torch_resnet18_cifar),
        (B.resnet50, 23_508_032, torch_resnet50),
        (B.vit_tiny, 1_357_056, lambda: TorchViT(32, 4, 192, 3, 3)),
        (B.vit_small16, 21_665_664, lambda: TorchViT(224, 16, 384, 12, 6)),
    ],
)
def test_parameter_counts(factory, expected, torch_factory):
    model = factory()
    shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0))
    assert param_count(shapes) == expected
    assert torch_count(torch_factory()) == expected


def test_small_model_counts_and_shapes():
    cnn = B.small_cnn((16, 16, 3), widths=(8, 16), activation="swish")
    v = cnn.init(jax.random.PRNGKey(0))
    # conv1 3*3*3*8 + 8, conv2 3*3*8*16 + 16
    assert param_count(v) == 3 * 3 * 3 * 8 + 8 + 3 * 3 * 8 * 16 + 16
    z, st = jax.jit(cnn.apply)(v, jnp.ones((5, 16, 16, 3), jnp.float32))
    assert z.shape == (5, 16) and st == {}
    f = B.mlp(10, hidden=(7,), out_dim=3, activation="tanh")
    vf = f.init(jax.random.PRNGKey(1))
    assert param_count(vf) == 10 * 7 + 7 + 7 * 3 + 3
    assert jax.eval_shape(f.apply, vf, jnp.ones((4, 10)))[0].shape == (4, 3)


# ----------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def rn18_pair():
    from ssl_geometry import pretrained

    torch.manual_seed(0)
    tm = torch_resnet18_cifar()
    model, variables = pretrained.resnet_from_torch(state_numpy(tm), depth=18, cifar_stem=True)
    eval_fn = jax.jit(lambda v, x: model.apply(v, x, train=False))
    train_fn = jax.jit(lambda v, x: model.apply(v, x, train=True))
    return tm, model, variables, eval_fn, train_fn


def test_resnet18_cifar_parity_eval(rn18_pair):
    tm, model, variables, eval_fn, _ = rn18_pair
    x = np.random.default_rng(0).normal(size=(3, 32, 32, 3)).astype(np.float32)
    z, state = eval_fn(variables, jnp.asarray(x))
    assert z.shape == (3, 512) and z.dtype == jnp.float32
    assert rel_err(z, torch_forward(tm, x)) < 1e-4
    # eval mode returns the running statistics unchanged
    chex_equal = jax.tree_util.tree_map(
        lambda a, b: bool(jnp.all(a == b)), state["batch_stats"], variables["batch_stats"]
    )
    assert all(jax.tree_util.tree_leaves(chex_equal))


def test_resnet18_cifar_parity_train_mode_bn_update(rn18_pair):
    tm, model, variables, _, train_fn = rn18_pair
    x = np.random.default_rng(1).normal(size=(4, 32, 32, 3)).astype(np.float32)
    tm_copy = torch_resnet18_cifar()
    tm_copy.load_state_dict(tm.state_dict())
    z_t = torch_forward(tm_copy, x, train=True)  # updates tm_copy's running stats (momentum 0.1, unbiased var)
    z, state = train_fn(variables, jnp.asarray(x))
    assert rel_err(z, z_t) < 1e-4
    ts = tm_copy.state_dict()
    for path, key in [
        (("bn1",), "bn1"),
        (("layer2_0", "downsample_1"), "layer2.0.downsample.1"),
        (("layer4_1", "bn2"), "layer4.1.bn2"),
    ]:
        node = state["batch_stats"]
        for p in path:
            node = node[p]
        assert rel_err(node["mean"], ts[key + ".running_mean"].numpy()) < 1e-4
        assert rel_err(node["var"], ts[key + ".running_var"].numpy()) < 1e-4
        old = variables["batch_stats"]
        for p in path:
            old = old[p]
        assert not np.allclose(node["var"], old["var"])  # the statistics did move


def test_batchnorm_running_update_formula():
    """Running stats: r <- 0.9 r + 0.1 * batch, with the unbiased variance (PyTorch)."""
    bn = B.BatchNorm(dtype=jnp.float64, param_dtype=jnp.float64)
    x = np.random.default_rng(2).normal(size=(3, 2, 2, 4)) * 2.0 + 1.0
    v = bn.init(jax.random.PRNGKey(0), x, train=False)
    y, mut = bn.apply(v, x, train=True, mutable=["batch_stats"])
    flat = x.reshape(-1, 4)
    np.testing.assert_allclose(mut["batch_stats"]["mean"], 0.1 * flat.mean(0), rtol=1e-12)
    np.testing.assert_allclose(mut["batch_stats"]["var"], 0.9 + 0.1 * flat.var(0, ddof=1), rtol=1e-12)
    np.testing.assert_allclose(
        np.asarray(y).reshape(-1, 4), (flat - flat.mean(0)) / np.sqrt(flat.var(0) + 1e-5), rtol=1e-10
    )


@pytest.fixture(scope="module")
def vit_tiny_pair():
    from ssl_geometry import pretrained

    torch.manual_seed(1)
    tm = TorchViT(32, 4, 192, 3, 3)
    model, variables = pretrained.vit_from_torch(state_numpy(tm), patch=4, heads=3)
    return tm, model, variables


def test_vit_tiny_parity(vit_tiny_pair):
    tm, model, variables = vit_tiny_pair
    assert model.in_shape == (32, 32, 3) and model.out_dim == 192
    x = np.random.default_rng(3).normal(size=(2, 32, 32, 3)).astype(np.float32)
    z, state = jax.jit(lambda v, x: model.apply(v, x))(variables, jnp.asarray(x))
    assert state == {} and z.shape == (2, 192)
    assert rel_err(z, torch_forward(tm, x)) < 1e-4


def test_vit_position_interpolation_matches_dino():
    """Non-native resolution: bicubic position-grid interpolation exactly as DINO (torch) does it."""
    from ssl_geometry import pretrained

    torch.manual_seed(2)
    tm = TorchViT(img_size=64, patch=16, dim=384, depth=1, heads=6)  # 4x4 grid, evaluated on 6x8 patches
    model, variables = pretrained.vit_from_torch(state_numpy(tm), patch=16, heads=6)
    x = np.random.default_rng(4).normal(size=(2, 96, 128, 3)).astype(np.float32)
    z, _ = jax.jit(model.apply)(variables, jnp.asarray(x))
    assert rel_err(z, torch_forward(tm, x)) < 1e-4


@pytest.mark.parametrize("n_in,n_out", [(14, 4), (4, 9), (7, 7)])
def test_bicubic_matrix_matches_torch_interpolate(n_in, n_out):
    v = np.random.default_rng(5).normal(size=(n_in,))
    sf = (n_out + 0.1) / n_in
    A = B.bicubic_resize_matrix(n_in, n_out, sf)
    ref = F.interpolate(torch.tensor(v).reshape(1, 1, 1, n_in), scale_factor=(1.0, sf), mode="bicubic").numpy().ravel()
    assert ref.shape == (n_out,)
    np.testing.assert_allclose(A @ v, ref, rtol=1e-10, atol=1e-12)


# ----------------------------------------------------------------------------- composition
def test_jit_grad_jvp_compose_float64():
    model = B.small_cnn((8, 8, 3), widths=(4, 6), activation="swish", batch_norm=True, dtype=jnp.float64)
    v = model.init(jax.random.PRNGKey(0))
    x = jax.random.normal(jax.random.PRNGKey(1), (3, 8, 8, 3), jnp.float64)
    w = jax.random.normal(jax.random.PRNGKey(2), (6,), jnp.float64)

    def loss(x, v):
        return jnp.sum(jnp.tanh(model.apply(v, x, train=True)[0] @ w))

    d = jax.random.normal(jax.random.PRNGKey(3), x.shape, jnp.float64)
    eps = 1e-6

    @jax.jit  # one compilation for everything below
    def all_at_once(x, d, v):
        g = jax.grad(loss)(x, v)
        fd = (loss(x + eps * d, v) - loss(x - eps * d, v)) / (2 * eps)
        _, t = jax.jvp(lambda y: loss(y, v), (x,), (d,))
        gp = jax.grad(lambda p: jnp.sum(model.apply({**v, "params": p}, x, train=True)[0] ** 2))(v["params"])
        return jnp.vdot(g, d), t, fd, gp

    gd, t, fd, gp = all_at_once(x, d, v)
    np.testing.assert_allclose(gd, fd, rtol=1e-7)
    np.testing.assert_allclose(t, fd, rtol=1e-7)
    # grad with respect to parameters composes too
    assert jax.tree_util.tree_structure(gp) == jax.tree_util.tree_structure(v["params"])
    assert all(bool(jnp.all(jnp.isfinite(l))) for l in jax.tree_util.tree_leaves(gp))


def test_float64_and_param_dtype():
    m = B.vit(img_size=8, patch=4, dim=8, depth=1, heads=2, dtype=jnp.float64)
    v = jax.eval_shape(m.init, jax.random.PRNGKey(0))
    assert all(l.dtype == jnp.float64 for l in jax.tree_util.tree_leaves(v))
    assert jax.eval_shape(m.apply, v, jnp.ones((1, 8, 8, 3)))[0].dtype == jnp.float64
    m16 = B.small_cnn((8, 8, 3), widths=(4,), dtype=jnp.bfloat16, param_dtype=jnp.float32)
    v16 = jax.eval_shape(m16.init, jax.random.PRNGKey(0))
    assert jax.tree_util.tree_leaves(v16)[0].dtype == jnp.float32
    assert jax.eval_shape(m16.apply, v16, jnp.ones((1, 8, 8, 3), jnp.float32))[0].dtype == jnp.bfloat16


# ----------------------------------------------------------------------------- errors and keys
def test_bad_inputs_raise_clear_errors():
    key = jax.random.PRNGKey(0)
    cnn = B.small_cnn((8, 8, 3), widths=(4,))
    v = jax.eval_shape(cnn.init, key)  # the checks run before any computation
    with pytest.raises(ValueError, match="rank 4"):
        cnn.apply(v, jnp.ones((8, 8, 3)))
    with pytest.raises(ValueError, match="3 channels"):
        cnn.apply(v, jnp.ones((2, 3, 8, 8)))
    with pytest.raises(TypeError, match="float"):
        cnn.apply(v, jnp.ones((2, 8, 8, 3), jnp.uint8))
    vt = B.vit(img_size=8, patch=4, dim=8, depth=1, heads=2)
    with pytest.raises(ValueError, match="multiple of the patch size 4"):
        vt.apply(jax.eval_shape(vt.init, key), jnp.ones((1, 10, 8, 3)))
    bn = B.small_cnn((8, 8, 3), widths=(4,), batch_norm=True)
    with pytest.raises(ValueError, match="at least 2"):
        bn.apply(jax.eval_shape(bn.init, key), jnp.ones((1, 8, 8, 3)), train=True)
    with pytest.raises(ValueError, match="depth"):
        B.resnet(19)
    with pytest.raises(ValueError, match="activation"):
        B.small_cnn(activation="nope")


def test_torch_key_mapping():
    assert B.torch_key(("params", "layer1_0", "downsample_0", "kernel")) == "layer1.0.downsample.0.weight"
    assert B.torch_key(("batch_stats", "layer3_5", "bn2", "var")) == "layer3.5.bn2.running_var"
    assert B.torch_key(("params", "blocks_11", "attn", "qkv", "bias")) == "blocks.11.attn.qkv.bias"
    assert B.torch_key(("params", "patch_embed", "proj", "kernel")) == "patch_embed.proj.weight"
    assert B.torch_key(("params", "norm", "scale")) == "norm.weight"
    assert B.torch_key(("params", "pos_embed")) == "pos_embed"
    # every ResNet-18/ViT-Tiny variable maps onto a distinct torch key, and the sets coincide
    for model, tm in [(B.resnet18_cifar(), torch_resnet18_cifar()), (B.vit_tiny(), TorchViT(32, 4, 192, 3, 3))]:
        shapes = jax.eval_shape(model.init, jax.random.PRNGKey(0))
        keys = [B.torch_key(tuple(k.key for k in kp)) for kp, _ in jax.tree_util.tree_flatten_with_path(shapes)[0]]
        torch_keys = {k for k in tm.state_dict() if not k.endswith("num_batches_tracked")}
        assert len(keys) == len(set(keys)) and set(keys) == torch_keys


def test_apply_rejects_variables_of_another_width():
    a = B.small_cnn((8, 8, 3), widths=(4, 8), batch_norm=True)
    b = B.small_cnn((8, 8, 3), widths=(4, 9), batch_norm=True)
    x = jnp.ones((2, 8, 8, 3))
    with pytest.raises(ValueError, match=r"`variables`: \S+ has shape \(9,\), but small_cnn.* expects \(8,\)"):
        a.apply(b.init(jax.random.PRNGKey(0)), x)
    with pytest.raises(ValueError, match="has shape"):
        jax.jit(lambda v, x: a.apply(v, x, train=True))(b.init(jax.random.PRNGKey(0)), x)
    with pytest.raises(ValueError, match="'params'"):
        a.apply({}, x)
    y, _ = a.apply(a.init(jax.random.PRNGKey(0)), x)
    assert y.shape == (2, a.out_dim)
