"""Flow control: limits, fairness, batches, skip-queue, idempotency claims and backpressure.

See ``docs/guides/flow-control.md``.
"""

from .backpressure import WorkerStats, adaptive_delay

__all__ = ["WorkerStats", "adaptive_delay"]
