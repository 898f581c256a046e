"""Flow control: limits, fairness, batches, skip-queue, idempotency claims and backpressure.

See ``docs/guides/flow-control.md``.
"""
