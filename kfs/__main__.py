"""``python -m kfs``: the same as the ``kfs`` console script."""

from kfs.cli import main

raise SystemExit(main())
