"""``python -m conformance.engine`` (from the repository root), or
``python conformance/engine`` (from anywhere)."""

import sys

if not __package__:
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    __package__ = "conformance.engine"  # noqa: A001

from conformance.engine.cli import main  # noqa: E402

sys.exit(main())
