"""Train an SSL model from a config file: ``python -m ssl_geometry.train`` (or ``ssl-geometry-train``).

Usage::

    python -m ssl_geometry.train --config experiments/configs/tiny.py --workdir /tmp/tiny \\
        [--config.train.steps=200] [--config.objective.name=byol] ...

:func:`main` parses ``argv`` (:func:`parse_args`), runs :func:`ssl_geometry.trainer.train` and
returns the exit status: 0 on success, 2 for bad input or a refused run, 1 for a failure during
the run. The config fields, the workdir's guarantees and the resume rules are documented in
:func:`ssl_geometry.trainer.train`.

:func:`cli` is the ``ssl-geometry-train`` console script.
"""

import sys

from ssl_geometry._src.training.cli import main as main
from ssl_geometry._src.training.cli import parse_args as parse_args

__all__ = ["main", "parse_args", "cli"]


def cli() -> None:
    """The ``ssl-geometry-train`` console script: :func:`main` on ``sys.argv``, its status as the exit code."""
    sys.exit(main())


if __name__ == "__main__":
    cli()
