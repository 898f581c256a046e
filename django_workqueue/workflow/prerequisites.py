"""A dependent's open prerequisites: the one rule for whether a step may run yet.

A step waits on its prerequisites while it is ``blocked`` or ``held``
(``states.AWAITING_PREREQUISITES``), and both are treated alike by every writer that changes
what it waits on: steps a prerequisite adds at run time are added to what it waits on
(``store.write_spawn``), a continuation takes the prerequisite's place in its edges.

Its counters (``waiting_on``, ``prerequisites_succeeded``) are kept in one of two ways, and
``conditions.verdict`` decides from them either way:

* **counted down** as prerequisites end, on ``blocked`` and ``held`` rows alike
  (``Driver.count_down``, one statement per batch of endings: the hot path never reads the
  graph); a held row's verdict waits for its release;
* **recounted** from its edges by ``standing`` when a step comes back to waiting: a held step
  released (the verdict is decided then, with the prerequisite to name), a failed step
  redriven, a dependent brought back by a workflow's resumption. The workflows' rows and the
  prerequisites' rows are locked first (the lock order of ``locks.py``), so none of them ends
  between being read and being counted: an ending that commits later is counted down on the
  step, which is waiting again by then.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Sequence

from django.db.models import Q

from ..models import Dependency, Job
from ..states import ACTIVE, Status
from . import conditions
from .locks import lock_workflows


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Standing:
    """Where a dependent's prerequisites stand, as their rows hold them now."""

    open: int
    """Prerequisites not finished (what ``waiting_on`` counts)."""
    succeeded: int
    ended: tuple[tuple[int, str], ...]
    """(prerequisite, status) of each finished one, in the order of the edges."""

    @property
    def unmet(self) -> bool:
        """Whether one of them ended without succeeding."""
        return len(self.ended) > self.succeeded

    def verdict(self, run_condition: str) -> conditions.Verdict:
        return conditions.verdict(run_condition, self.open, self.succeeded, self.unmet)


def standing(alias: str, dependents: Sequence[int]) -> dict[int, Standing]:
    """Lock the prerequisites of ``dependents`` and say where they stand, per dependent (one
    without prerequisites is left out)."""
    if not dependents:
        return {}
    edges = Dependency.objects.using(alias).filter(job_id__in=dependents)
    named = edges.values("prerequisite_id")
    # The workflows' rows first (the dependents' and the prerequisites', one call: id order),
    # then the prerequisites' rows in id order (locks.py).
    flows = Job.objects.using(alias).filter(Q(id__in=dependents) | Q(id__in=named))
    lock_workflows(alias, flows.order_by().values_list("workflow_id", flat=True).distinct())
    locked = Job.objects.using(alias).select_for_update().order_by("id")
    list(locked.filter(id__in=named).values_list("id"))
    # Read after the locks were granted: a prerequisite that ended (or added steps, which its
    # dependents now wait on too) while this transaction waited is seen as it committed.
    found: dict[int, list[tuple[int, str]]] = collections.defaultdict(list)
    for job_id, prerequisite, status in edges.order_by("job_id", "position").values_list(
        "job_id", "prerequisite_id", "prerequisite__status"
    ):
        found[job_id].append((prerequisite, status))
    result = {}
    for job_id, prerequisites in found.items():
        ended = tuple((p, status) for p, status in prerequisites if status not in ACTIVE)
        result[job_id] = Standing(
            open=len(prerequisites) - len(ended),
            succeeded=sum(status == Status.SUCCEEDED for _, status in ended),
            ended=ended,
        )
    return result
