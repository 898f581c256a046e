"""The pool tests' settings, refused by the process pool's children: a worker can import them,
its children cannot (what a project whose import breaks in a fresh interpreter looks like)."""

import sys
from pathlib import Path

from tests.acceptance.settings_pools import *  # noqa: F403

if Path(sys.argv[0]).parts[-2:] == ("worker", "spawned.py"):
    raise ImportError("these settings refuse to load in a child of the process pool")
