"""Converted-checkpoint files that do not fit their models are refused, naming what differs.

Every file here is made by the test: a tiny DINO ViT (one 16x16 patch, width 12, one block) with a
DINO head, saved with ``pretrained.save_converted`` and damaged in one way per case. No torch.
"""

import json

import jax
import numpy as np
import pytest
from safetensors.numpy import save_file

from ssl_geometry import backbones
from ssl_geometry import pretrained as P

HEAD = dict(in_dim=12, out_dim=5, hidden_dim=8, bottleneck_dim=4, nlayers=2, use_bn=False)
CONFIG = {"kind": "dino_vits16", "which": "teacher", "img_size": 16, "depth": 1, "dim": 12, "head": HEAD}


def _variables():
    backbone = backbones.vit(img_size=16, patch=16, dim=12, depth=1, heads=6)
    head = P.dino_head(**HEAD)
    return {"backbone": backbone.init(jax.random.PRNGKey(0)), "head": head.init(jax.random.PRNGKey(1))}


def _save(tmp_path, variables, config=CONFIG, name="tiny.safetensors"):
    return P.save_converted(variables, tmp_path / name, config=config)


def test_a_file_that_fits_loads_as_pretrained(tmp_path):
    v = _variables()
    pre = P.load_converted(_save(tmp_path, v))
    assert isinstance(pre, P.Pretrained) and pre.head.out_dim == 5 and pre.config == CONFIG
    np.testing.assert_array_equal(
        pre.variables["head"]["params"]["last_layer"]["v"], v["head"]["params"]["last_layer"]["v"]
    )
    z, u = pre.apply(pre.variables, np.zeros((2, 16, 16, 3), np.float32))
    assert z.shape == (2, 12) and u.shape == (2, 5)


def test_a_tensor_of_the_wrong_shape_is_named(tmp_path):
    v = _variables()
    v["head"]["params"]["mlp"]["layers"][1]["w"] = np.zeros((8, 7), np.float32)  # the model expects (8, 4)
    path = _save(tmp_path, v)
    with pytest.raises(P.CheckpointLayoutError) as e:
        P.load_converted(path)
    msg = str(e.value)
    assert str(path) in msg and "head" in msg and "params/mlp/layers[1]/w has shape (8, 7)" in msg
    assert "expects (8, 4)" in msg
    v = _variables()
    v["backbone"]["params"]["pos_embed"] = np.zeros((1, 5, 12), np.float32)
    with pytest.raises(P.CheckpointLayoutError, match=r"backbone: the tensor params/pos_embed has shape \(1, 5, 12\)"):
        P.load_converted(_save(tmp_path, v, name="b.safetensors"))


def test_a_missing_or_an_extra_tensor_is_named(tmp_path):
    v = _variables()
    del v["head"]["params"]["last_layer"]["g"]
    with pytest.raises(P.CheckpointLayoutError, match=r"params/last_layer/g \(shape \(5,\)\) .* is missing"):
        P.load_converted(_save(tmp_path, v))
    v = _variables()
    v["head"]["params"]["extra"] = np.zeros(3, np.float32)
    with pytest.raises(P.CheckpointLayoutError, match="params/extra .* is not a tensor of"):
        P.load_converted(_save(tmp_path, v, name="x.safetensors"))
    with pytest.raises(P.CheckpointLayoutError, match="'backbone/...' and 'head/...'"):
        P.load_converted(_save(tmp_path, {"head": _variables()["head"]}, name="h.safetensors"))


def test_unknown_kinds_and_names_are_refused_naming_the_known_ones(tmp_path):
    path = _save(tmp_path, _variables(), config={**CONFIG, "kind": "swav_resnet50"})
    with pytest.raises(
        P.CheckpointLayoutError,
        match=r"unknown converted checkpoint kind 'swav_resnet50'.*"
        r"'barlowtwins_resnet50', 'dino_resnet50'",
    ):
        P.load_converted(path)
    with pytest.raises(ValueError, match=r"Unknown checkpoint name 'foo'; expected one of \['barlowtwins_resnet50'"):
        P.load_torch_checkpoint(tmp_path / "whatever.pth", name="foo")


def test_file_errors_are_corrupt_checkpoint_errors_naming_the_path(tmp_path):
    good = _save(tmp_path, _variables())
    data = good.read_bytes()
    cases = {
        "text.safetensors": b"not a safetensors file\n",
        "empty.safetensors": b"",
        "truncated.safetensors": data[: len(data) // 2],
        "header_only.safetensors": data[:200],
    }
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(P.CorruptCheckpointError) as e:
            P.load_converted(tmp_path / name)
        assert str(tmp_path / name) in str(e.value), name
    bad_json = tmp_path / "json.safetensors"
    save_file({"a": np.zeros(2, np.float32)}, str(bad_json), metadata={"config": "{not json"})
    with pytest.raises(P.CorruptCheckpointError, match=r"json\.safetensors.*not valid JSON"):
        P.load_converted(bad_json)
    no_field = _save(
        tmp_path, _variables(), config={k: v for k, v in CONFIG.items() if k != "depth"}, name="nofield.safetensors"
    )
    with pytest.raises(P.CorruptCheckpointError, match=r"nofield\.safetensors.*cannot rebuild.*'depth'"):
        P.load_converted(no_field)
    listy = tmp_path / "list.safetensors"
    save_file({"a": np.zeros(2, np.float32)}, str(listy), metadata={"config": json.dumps([1, 2])})
    with pytest.raises(P.CorruptCheckpointError, match="JSON object"):
        P.load_converted(listy)
