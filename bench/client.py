"""Entry point of client processes: ``python -m bench.client <system> <action> '<json kwargs>'``.

Runs ``client_<action>(**kwargs)`` of the system's module and prints its JSON result on a line
starting with ``BENCH-RESULT`` (anything else a library prints is ignored).
"""

from __future__ import annotations

import importlib
import json
import sys

from bench.systems import MODULES
from bench.systems.base import RESULT_PREFIX


def main(argv: list[str]) -> None:
    system, action, kwargs = argv[0], argv[1], json.loads(argv[2]) if len(argv) > 2 else {}
    module = importlib.import_module(MODULES[system][0])
    result = getattr(module, f"client_{action}")(**kwargs)
    sys.stdout.write(RESULT_PREFIX + json.dumps(result) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main(sys.argv[1:])
