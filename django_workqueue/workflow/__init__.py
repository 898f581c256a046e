"""Workflows: chains, groups, chords and dependency graphs of jobs, stored in the database.

>>> from django_workqueue import chain, group
>>> chain(fetch.s(url), parse.s(), store.s()).enqueue()
>>> group(resize.s(i) for i in ids).then(build_album.s(album_id)).enqueue()

``canvas`` builds and validates compositions, ``store`` writes them, ``release`` counts each
job's ending on its dependents and its workflow in the transaction that records it, and
``conditions`` decides what a dependent's counters mean, ``prerequisites`` recounts them when a
step comes back to waiting, and ``locks`` holds the lock order every writer follows. See
docs/guides/workflows.md and docs/explanation/architecture.md.
"""

from .canvas import Chain, Group, Signature, chain, group

__all__ = ["Chain", "Group", "Signature", "chain", "group"]
