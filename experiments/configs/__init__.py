"""Experiment configs in the big_vision style: one base with sections, variants as overrides.

Every config module defines ``get_config(arg=None)`` as ``build(base(), VARIANTS, arg)``:

* ``base()`` returns an ``ml_collections.ConfigDict`` in which **every** field is defined,
  grouped in sections (``data``, ``model``, ``train``, ``analysis``, ``verdict``, ...);
* ``VARIANTS`` maps a variant name (``tiny``, ``smoke``, ``paper``, ...) to a flat dict of
  overrides with dotted keys (``{"train.steps": 200}``).

:func:`build` applies one variant to a locked copy of the base, so an override of a field
the base does not define fails at once with the field's name. ``arg`` is the text after the
colon in ``--config experiments/configs/<name>.py:<arg>`` (``ml_collections.config_flags``);
``None`` or ``""`` means ``smoke``. ``config.variant`` records which variant was built;
``config.dry_run`` (default ``False``) is set by ``reproduce --dry-run``: the experiment then runs
its variant end to end at reduced batches and image counts, a few steps per training phase, and
reports its training and analysis, each timed at two reduced sizes, projected to the full variant
(``experiments.projection``).
"""

from __future__ import annotations

from typing import Any, Mapping

import ml_collections

DEFAULT_VARIANT = "smoke"


def apply_overrides(config: ml_collections.ConfigDict, overrides: Mapping[str, Any]) -> ml_collections.ConfigDict:
    """Set each dotted key of ``overrides`` on ``config`` (in place); every key must already exist.

    Raises:
      KeyError: naming the override whose field the config does not define.
    """
    for dotted, value in overrides.items():
        *path, leaf = dotted.split(".")
        node = config
        for i, part in enumerate(path):
            if part not in node:
                raise KeyError(f"override {dotted!r}: the config has no section {'.'.join(path[: i + 1])!r}.")
            node = node[part]
        if leaf not in node:
            raise KeyError(
                f"override {dotted!r}: the config defines no field {leaf!r} in "
                f"{'.'.join(path) or 'the top level'} (define it in base() first)."
            )
        node[leaf] = value
    return config


def build(
    base: ml_collections.ConfigDict, variants: Mapping[str, Mapping[str, Any]], arg: str | None = None
) -> ml_collections.ConfigDict:
    """The config of variant ``arg`` (default ``smoke``): ``base`` with ``variants[arg]`` applied.

    The result is locked (no new fields) and has ``variant`` set to the variant's name.

    Example:
      >>> import ml_collections
      >>> b = ml_collections.ConfigDict({"variant": "", "train": {"steps": 10, "lr": 0.1}})
      >>> build(b, {"smoke": {}, "tiny": {"train.steps": 2}}, "tiny").train.steps
      2
    """
    name = arg or DEFAULT_VARIANT
    if name not in variants:
        raise ValueError(f"unknown variant {name!r}; expected one of {sorted(variants)}.")
    config = ml_collections.ConfigDict(base.to_dict() if hasattr(base, "to_dict") else base)
    for field, default in (("variant", ""), ("dry_run", False)):
        if field not in config:
            config[field] = default
    config.lock()
    apply_overrides(config, variants[name])
    config.variant = name
    return config
