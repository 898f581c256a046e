"""Whether a module was imported: for the tests that no name from outside imports one."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

NAMED_MODULE = "tests.support.named_module"
# How many times NAMED_MODULE was imported, kept in the environment by the module itself.
COUNTER = "WORKQUEUE_TEST_NAMED_MODULE_IMPORTS"
# A file NAMED_MODULE appends its pid to when it is imported (by a worker's process).
MARKER = "WORKQUEUE_TEST_IMPORT_MARKER"


@contextmanager
def never_imported(*modules: str) -> Iterator[None]:
    """Unload ``modules`` (and forget the named module's import count) for the block, and
    fail if any of them was imported inside it."""
    saved = {name: sys.modules.pop(name) for name in modules if name in sys.modules}
    count = os.environ.pop(COUNTER, None)
    try:
        yield
        imported = [name for name in modules if name in sys.modules]
        assert imported == [], f"imported by name: {imported}"
        assert COUNTER not in os.environ, "tests.support.named_module ran its import"
    finally:
        for name in modules:
            sys.modules.pop(name, None)
        sys.modules.update(saved)
        if count is not None:
            os.environ[COUNTER] = count
        else:
            os.environ.pop(COUNTER, None)
