"""A task module whose import holds a worker in its start-up: it writes its pid to the file
named by ``BLOCKING_IMPORT_MARKER`` and waits (at most a minute) for that file to be deleted.
The stop-signal tests send their signal while it waits (WORKQUEUE_TASK_MODULES)."""

import os
import time
from pathlib import Path

_marker = Path(os.environ["BLOCKING_IMPORT_MARKER"])
_marker.write_text(str(os.getpid()))
_deadline = time.monotonic() + 60
while _marker.exists() and time.monotonic() < _deadline:
    time.sleep(0.02)
