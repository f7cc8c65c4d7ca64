"""Checkpoint converters: official key layouts -> JAX, output parity, safe loading, errors.

For each release a randomly initialised PyTorch model in the exact key layout of the official
full checkpoint is saved as the release is (nested dicts, DDP ``module.`` prefixes, optimizer
state, DINO's ``argparse.Namespace``), converted, and compared in float32 to 1e-4 relative.
Head widths are reduced (the converters read widths from the tensors); backbones are full size.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ssl_geometry import backbones as B
from ssl_geometry import pretrained as P

torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

sys.path.insert(0, str(Path(__file__).parent))
from test_backbones import TorchViT, rel_err, torch_forward, torch_resnet50  # noqa: E402 - needs torch (skip above)


# ----------------------------------------------------------------------------- torch references
def _randomise_bn(module):
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
                if m.affine:
                    m.weight.uniform_(0.5, 1.5)
                    m.bias.uniform_(-0.2, 0.2)
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 2.0)


class TorchWeightNormLinear(nn.Module):
    """``nn.utils.weight_norm(nn.Linear(i, o, bias=False))`` with its legacy keys ``weight_g``/``weight_v``."""

    def __init__(self, i, o):
        super().__init__()
        self.weight_g = nn.Parameter(torch.rand(o, 1) + 0.5)
        self.weight_v = nn.Parameter(torch.randn(o, i))

    def forward(self, x):
        return F.linear(x, self.weight_g * self.weight_v / self.weight_v.norm(dim=1, keepdim=True))


class TorchDINOHead(nn.Module):
    """``facebookresearch/dino`` ``DINOHead`` (nlayers=3)."""

    def __init__(self, in_dim, out_dim, use_bn=False, hidden=48, bottleneck=24):
        super().__init__()
        layers = [nn.Linear(in_dim, hidden)] + ([nn.BatchNorm1d(hidden)] if use_bn else []) + [nn.GELU()]
        layers += [nn.Linear(hidden, hidden)] + ([nn.BatchNorm1d(hidden)] if use_bn else []) + [nn.GELU()]
        layers += [nn.Linear(hidden, bottleneck)]
        self.mlp = nn.Sequential(*layers)
        self.last_layer = TorchWeightNormLinear(bottleneck, out_dim)
        _randomise_bn(self)

    def forward(self, x):
        return self.last_layer(F.normalize(self.mlp(x), dim=-1, p=2))


class TorchPair(nn.Module):
    def __init__(self, backbone, head_name, head, extra=None):
        super().__init__()
        self.backbone = backbone
        setattr(self, head_name, head)
        self.head_name = head_name
        if extra is not None:
            self.bn = extra


def vicreg_projector_t(dims):
    layers = []
    for i in range(len(dims) - 2):
        layers += [nn.Linear(dims[i], dims[i + 1]), nn.BatchNorm1d(dims[i + 1]), nn.ReLU(True)]
    layers.append(nn.Linear(dims[-2], dims[-1], bias=False))
    seq = nn.Sequential(*layers)
    _randomise_bn(seq)
    return seq


def barlow_projector_t(dims):
    layers = []
    for i in range(len(dims) - 2):
        layers += [nn.Linear(dims[i], dims[i + 1], bias=False), nn.BatchNorm1d(dims[i + 1]), nn.ReLU(True)]
    layers.append(nn.Linear(dims[-2], dims[-1], bias=False))
    seq = nn.Sequential(*layers)
    _randomise_bn(seq)
    return seq


def ddp(state):
    return {"module." + k: v for k, v in state.items()}


def head_forward(head, z):
    head.eval()
    with torch.no_grad():
        return head(torch.from_numpy(np.asarray(z))).numpy()


def fake_optimizer(model):
    ps = list(model.parameters())[:2]
    return {
        "state": {0: {"momentum_buffer": torch.zeros_like(ps[0])}},
        "param_groups": [{"lr": 0.1, "momentum": 0.9, "params": [0, 1]}],
    }


# ----------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="module")
def rn50_forward():
    model = B.resnet50()
    return jax.jit(lambda v, x: model.apply(v, x)[0])


@pytest.fixture(scope="module")
def images64():
    return np.random.default_rng(0).normal(size=(2, 64, 64, 3)).astype(np.float32)


@pytest.fixture(scope="module")
def dino_vit_file(tmp_path_factory):
    torch.manual_seed(0)
    teacher = TorchPair(TorchViT(224, 16, 384, 12, 6), "head", TorchDINOHead(384, 40))
    student = TorchPair(TorchViT(224, 16, 384, 12, 6), "head", TorchDINOHead(384, 40))
    ckpt = {
        "student": ddp(student.state_dict()),
        "teacher": teacher.state_dict(),  # teacher not DDP (no BN)
        "optimizer": fake_optimizer(student),
        "epoch": 800,
        "args": argparse.Namespace(arch="vit_small", patch_size=16, out_dim=65536, use_bn_in_head=False),
        "dino_loss": {"center": torch.zeros(1, 40)},
        "fp16_scaler": {"scale": 65536.0, "_growth_tracker": 7},
    }
    path = tmp_path_factory.mktemp("dino_vit") / P.CHECKPOINTS["dino_vits16"].filename
    torch.save(ckpt, path)
    return path, teacher, student


@pytest.fixture(scope="module")
def dino_rn50_file(tmp_path_factory):
    torch.manual_seed(1)
    teacher = TorchPair(torch_resnet50(), "head", TorchDINOHead(2048, 30, use_bn=True))
    student = TorchPair(torch_resnet50(), "head", TorchDINOHead(2048, 30, use_bn=True))
    # BN in the head -> DINO wraps the teacher in DDP too
    ckpt = {
        "student": ddp(student.state_dict()),
        "teacher": ddp(teacher.state_dict()),
        "optimizer": fake_optimizer(student),
        "epoch": 100,
        "args": argparse.Namespace(arch="resnet50", use_bn_in_head=True),
    }
    path = tmp_path_factory.mktemp("dino_rn50") / P.CHECKPOINTS["dino_resnet50"].filename
    torch.save(ckpt, path)
    return path, teacher, student


@pytest.fixture(scope="module")
def vicreg_file(tmp_path_factory):
    torch.manual_seed(2)
    model = TorchPair(torch_resnet50(), "projector", vicreg_projector_t((2048, 64, 64, 32)))
    path = tmp_path_factory.mktemp("vicreg") / P.CHECKPOINTS["vicreg_resnet50"].filename
    torch.save({"epoch": 1000, "model": ddp(model.state_dict()), "optimizer": fake_optimizer(model)}, path)
    return path, model


@pytest.fixture(scope="module")
def barlow_file(tmp_path_factory):
    torch.manual_seed(3)
    loss_bn = nn.BatchNorm1d(32, affine=False)
    _randomise_bn(loss_bn)
    model = TorchPair(torch_resnet50(), "projector", barlow_projector_t((2048, 64, 64, 32)), extra=loss_bn)
    path = tmp_path_factory.mktemp("barlow") / P.CHECKPOINTS["barlowtwins_resnet50"].filename
    torch.save({"epoch": 1000, "model": ddp(model.state_dict()), "optimizer": fake_optimizer(model)}, path)
    return path, model


# ----------------------------------------------------------------------------- parity
def test_dino_vits16_parity_and_roundtrip(dino_vit_file, tmp_path):
    path, teacher, _ = dino_vit_file
    pre = P.convert_dino_vits16(path)  # teacher by default
    assert pre.backbone.in_shape == (224, 224, 3) and pre.head.out_dim == 40
    x = np.random.default_rng(1).normal(size=(2, 224, 224, 3)).astype(np.float32)
    z, u = jax.jit(pre.apply)(pre.variables, jnp.asarray(x))
    z_t = torch_forward(teacher.backbone, x)
    assert rel_err(z, z_t) < 1e-4
    assert rel_err(u, head_forward(teacher.head, z_t)) < 1e-4
    # save -> load with numpy/safetensors only -> same models and variables
    file = P.save_converted(pre, tmp_path / "dino_vits16.safetensors")
    back = P.load_converted(file)
    assert isinstance(back, P.Pretrained) and back.config == pre.config
    chex.assert_trees_all_equal(pre.variables, back.variables)  # structure, shapes, dtypes and values
    np.testing.assert_allclose(back.head.apply(back.variables["head"], z)[0], u, rtol=1e-6)


def test_dino_resnet50_teacher_and_student(dino_rn50_file, rn50_forward, images64):
    path, teacher, student = dino_rn50_file
    for which, tm in [("teacher", teacher), ("student", student)]:
        pre = P.convert_dino_resnet50(path, which=which)
        assert pre.config["head"]["use_bn"] is True
        z = rn50_forward(pre.variables["backbone"], jnp.asarray(images64))
        z_t = torch_forward(tm.backbone, images64)
        assert rel_err(z, z_t) < 1e-4
        u, state = pre.head.apply(pre.variables["head"], z)
        assert rel_err(u, head_forward(tm.head, z_t)) < 1e-4
        assert "batch_stats" in state
    # teacher and student really differ, so the selection is tested
    assert not np.allclose(torch_forward(teacher.backbone, images64), torch_forward(student.backbone, images64))


def test_vicreg_resnet50_parity(vicreg_file, rn50_forward, images64):
    path, tm = vicreg_file
    pre = P.convert_vicreg_resnet50(path)
    assert pre.config["dims"] == [2048, 64, 64, 32]
    assert (
        "b" in pre.variables["head"]["params"]["layers"][0] and "b" not in pre.variables["head"]["params"]["layers"][-1]
    )
    z = rn50_forward(pre.variables["backbone"], jnp.asarray(images64))
    z_t = torch_forward(tm.backbone, images64)
    assert rel_err(z, z_t) < 1e-4
    assert rel_err(pre.head.apply(pre.variables["head"], z)[0], head_forward(tm.projector, z_t)) < 1e-4
    # train mode (batch of 16 representations): batch statistics and PyTorch's running-statistics update
    zb = np.random.default_rng(5).normal(size=(16, 2048)).astype(np.float32)
    t_proj = vicreg_projector_t((2048, 64, 64, 32))
    t_proj.load_state_dict(tm.projector.state_dict())
    t_proj.train()
    with torch.no_grad():
        u_t = t_proj(torch.from_numpy(zb)).numpy()
    u, st = pre.head.apply(pre.variables["head"], jnp.asarray(zb), train=True)
    assert rel_err(u, u_t) < 1e-4
    assert rel_err(st["batch_stats"]["bn"][1]["var"], t_proj[4].running_var.numpy()) < 1e-5


@pytest.mark.parametrize("loss_bn", [False, True])
def test_barlowtwins_resnet50_parity(barlow_file, rn50_forward, images64, loss_bn):
    path, tm = barlow_file
    pre = P.convert_barlowtwins_resnet50(path, loss_bn=loss_bn)
    z = rn50_forward(pre.variables["backbone"], jnp.asarray(images64))
    z_t = torch_forward(tm.backbone, images64)
    assert rel_err(z, z_t) < 1e-4
    u_t = head_forward(tm.projector, z_t)
    if loss_bn:
        tm.bn.eval()
        with torch.no_grad():
            u_t = tm.bn(torch.from_numpy(u_t)).numpy()
    assert rel_err(pre.head.apply(pre.variables["head"], z)[0], u_t) < 1e-4


def test_save_load_lists_and_plain_variables(barlow_file, tmp_path):
    path, _ = barlow_file
    pre = P.convert_barlowtwins_resnet50(path, loss_bn=True)
    f = P.save_converted(pre, tmp_path / "bt.safetensors")
    back = P.load_converted(f, as_jax=False)
    assert isinstance(back.variables["head"]["params"]["projector"]["layers"], list)
    np.testing.assert_array_equal(
        back.variables["head"]["batch_stats"]["loss_bn"]["var"], pre.variables["head"]["batch_stats"]["loss_bn"]["var"]
    )
    # a bare variables tree (no config) round-trips as a tree
    g = P.save_converted({"a": [np.arange(3.0), {"b": np.ones((2, 2), np.float32)}]}, tmp_path / "t.safetensors")
    t = P.load_converted(g)
    np.testing.assert_array_equal(t["a"][0], np.arange(3.0)) and np.testing.assert_array_equal(t["a"][1]["b"], 1.0)


# ----------------------------------------------------------------------------- safety and errors
class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_pickle_payload_is_refused(tmp_path):
    marker = tmp_path / "PWNED"
    path = tmp_path / "evil.pth"
    torch.save({"model": {"w": torch.zeros(2)}, "payload": _Payload(marker)}, path)
    assert b"system" in path.read_bytes() or b"posix" in path.read_bytes()
    with pytest.raises(P.UnsafeCheckpointError, match="Refusing to load"):
        P.load_torch_checkpoint(path)
    with pytest.raises(P.UnsafeCheckpointError):
        P.convert_vicreg_resnet50(path)
    assert not marker.exists()


def test_unreadable_files_are_corrupt_not_unsafe(tmp_path):
    """Text, empty, truncated or non-torch pickles: 'not a checkpoint / corrupt', never 'unsafe'."""
    import pickle

    good = tmp_path / "good.pth"
    torch.save({"model": {"w": torch.ones(3)}}, good)
    data = good.read_bytes()
    files = {
        "text.pth": b"hello, this is not a checkpoint\n",
        "empty.pth": b"",
        "truncated.pth": data[: len(data) // 2],
        "plain.pkl": pickle.dumps({"a": 1, "w": [1.0, 2.0]}, protocol=4),
    }
    for fname, content in files.items():
        (tmp_path / fname).write_bytes(content)
        with pytest.raises(P.CorruptCheckpointError, match="not a readable PyTorch checkpoint") as e:
            P.load_torch_checkpoint(tmp_path / fname)
        assert fname in str(e.value) and "unsafe" not in str(e.value).lower()
        assert not isinstance(e.value, P.UnsafeCheckpointError)
    assert set(P.load_torch_checkpoint(good)) == {"model"}


def test_checkpoint_without_tensors_is_a_clear_error(tmp_path):
    path = tmp_path / "epoch.pth"
    torch.save({"epoch": 3}, path)
    with pytest.raises(P.CheckpointLayoutError, match=r"holds no tensors.*'epoch'"):
        P.load_torch_checkpoint(path)


def test_plain_pickle_payload_is_unsafe(tmp_path):
    """A raw (non-zip) pickle naming os.system is refused as unsafe, and does not run."""
    import pickle

    marker = tmp_path / "PWNED"
    path = tmp_path / "evil.pkl"
    path.write_bytes(pickle.dumps({"x": _Payload(marker)}, protocol=4))
    with pytest.raises(P.UnsafeCheckpointError, match="system"):
        P.load_torch_checkpoint(path)
    assert not marker.exists()


def test_non_tensor_entries_are_dropped(dino_vit_file):
    ckpt = P.load_torch_checkpoint(dino_vit_file[0])
    assert set(ckpt) == {"student", "teacher", "optimizer", "dino_loss"}  # epoch, args, fp16 scalars dropped
    assert isinstance(ckpt["teacher"]["backbone.pos_embed"], np.ndarray)
    assert "module.head.last_layer.weight_g" in ckpt["student"]
    assert "param_groups" not in ckpt["optimizer"]


def test_missing_file_names_official_file_and_url(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        P.convert_vicreg_resnet50(tmp_path / "nowhere.pth")
    assert "resnet50_fullckpt.pth" in str(
        e.value
    ) and "https://dl.fbaipublicfiles.com/vicreg/resnet50_fullckpt.pth" in str(e.value)
    with pytest.raises(FileNotFoundError, match="dino_deitsmall16_pretrain_full_checkpoint.pth"):
        P.convert_dino_vits16(tmp_path)  # a directory without the file
    with pytest.raises(FileNotFoundError, match="barlowtwins/ljng/checkpoint.pth"):
        P.convert_barlowtwins_resnet50(tmp_path / "x.pth")
    with pytest.raises(FileNotFoundError, match="save_converted"):
        P.load_converted(tmp_path / "none.safetensors")


def test_wrong_layout_lists_missing_and_unexpected_keys(vicreg_file):
    ckpt = P.load_torch_checkpoint(vicreg_file[0])
    state = dict(ckpt["model"])
    state["module.backbone.layer1.0.conv9.weight"] = state.pop("module.backbone.layer1.0.conv1.weight")
    with pytest.raises(P.CheckpointLayoutError) as e:
        P.convert_vicreg_resnet50({"model": state})
    msg = str(e.value)
    assert "Missing keys: layer1.0.conv1.weight" in msg and "Unexpected keys: layer1.0.conv9.weight" in msg
    with pytest.raises(P.CheckpointLayoutError, match="top-level key 'model'"):
        P.convert_vicreg_resnet50({"state_dict": ckpt["model"]})
    state = dict(ckpt["model"])
    state["module.projector.9.weight"] = np.zeros((3, 3), np.float32)
    with pytest.raises(P.CheckpointLayoutError, match="projector"):
        P.convert_vicreg_resnet50({"model": state})
    with pytest.raises(ValueError, match="which"):
        P.convert_dino_resnet50({"teacher": {}}, which="ema")


def test_imagenet_normalize():
    x = np.random.default_rng(0).uniform(size=(2, 4, 4, 3))
    y = P.imagenet_normalize(x)
    np.testing.assert_allclose(y, (x - np.array([0.485, 0.456, 0.406])) / np.array([0.229, 0.224, 0.225]), rtol=1e-12)
    with pytest.raises(ValueError, match="trailing dimension 3"):
        P.imagenet_normalize(np.zeros((2, 3, 4, 4)))
    with pytest.raises(TypeError, match="255"):
        P.imagenet_normalize(np.zeros((4, 4, 3), np.uint8))


def test_module_imports_without_torch():
    # torch made unimportable by a finder (a ``sys.modules['torch'] = None`` stand-in would break
    # libraries that look torch up in sys.modules, e.g. jaxtyping's printer, not ours)
    code = (
        "import sys, importlib.abc\n"
        "class NoTorch(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, *args):\n"
        "        if name == 'torch' or name.startswith('torch.'):\n"
        "            raise ImportError('torch is not installed (simulated)')\n"
        "sys.meta_path.insert(0, NoTorch())\n"
        "from ssl_geometry import pretrained as p; print(p.CHECKPOINTS['dino_vits16'].filename)\n"
        "assert 'torch' not in sys.modules"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=Path(__file__).parents[1],
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "dino_deitsmall16_pretrain_full_checkpoint.pth" in out.stdout
