"""`python -m radixkv`: the same command as `radixkv` (radixkv/cli.py)."""

from __future__ import annotations

import sys

from radixkv.cli import main

sys.exit(main())
