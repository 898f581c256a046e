"""Another process that sends signals: ``python -m tests.chaos.signaller SEED SPREAD ID...``
sends ``approve`` with ``{"job": ID}`` to each job once, in a shuffled order spread over SPREAD
seconds (so some arrive before the job waits, some while it waits), then prints ``sent N``."""

from __future__ import annotations

import random
import sys
import time


def main(argv: list[str]) -> None:
    import django

    django.setup()
    from django_workqueue import operations

    seed, spread, *ids = argv
    order = [int(pk) for pk in ids]
    random.Random(int(seed)).shuffle(order)
    pause = float(spread) / max(len(order), 1)
    for pk in order:
        operations.send_signal(pk, "approve", {"job": pk})
        time.sleep(pause)
    print(f"sent {len(order)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
