"""The worker: a control loop that claims into N slots, renews leases and runs maintenance.

One control thread does the claiming, the heartbeat, the maintenance services (promoter,
reaper, scheduler, and retention, which on PostgreSQL it starts on a thread of its own: run by
the one worker of the fleet that holds the maintenance lease, see ``maintenance/maintainer.py``)
and the completion writes on one connection; N slot
threads run jobs, one connection each; PostgreSQL adds one LISTEN connection. That is the
connection budget: concurrency + 2 (the slots: a fixed number, the sum of per-queue budgets, or
an autoscaling ceiling; see ``slots.py``), and one more on the maintainer while retention runs
(on a thread of its own: its bulk deletes take seconds, which the claims must not wait for).

Completions are batched: a slot hands its outcome to the control thread and is free at once;
the control thread writes every outcome that has piled up in one fenced statement, then claims
as many jobs as there are free slots in another, both in one transaction (``_write_and_claim``):
a pass costs the database one commit however many jobs it moves, and on PostgreSQL the
statements whose answers nothing waits for (the BEGIN, the statistics' upsert) ride with the
next one. The jobs claimed start once that transaction commits; if it rolls back, the outcomes
wait for the next try and the claimed rows are ready again. Under load each round trip carries
many jobs.

The loop sleeps on one Event, set by: a slot coming free, a NOTIFY for a served queue, an
in-process enqueue committing, or a stop request; it never sleeps longer than the poll interval
or past the next renewal or maintenance run, so polling always backs up the wake-ups. A pass
claims only when there is a reason to: a wake-up, a due poll, a filling batch or a rate limit
coming due, or a full claim just before; a pass for a renewal or maintenance alone claims
nothing. While the LISTEN connection is up the poll is ``LISTEN_POLL_INTERVAL`` (jittered):
an idle fleet then costs the database little (docs/explanation/performance.md#idle-fleet).

Every connection the worker opens to the jobs database is named ``workqueue:<worker id>``
(PostgreSQL's ``application_name``; see ``connections.serving``), so ``pg_stat_activity`` shows
which backends serve which worker.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import queue as queue_module
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence

from django.core.exceptions import ImproperlyConfigured
from django.db import connections, transaction
from django.utils import timezone

from .. import signalling, signals, wakeup
from ..attempt.asyncloop import AsyncLoop
from ..attempt.connections import (
    close_unusable_connections,
    is_connection_error,
    is_transient,
    serving,
    tidy_connections,
)
from ..attempt.lease import LeaseKeeper, RunningJob
from ..attempt.run import load_middlewares, run
from ..conf import workqueue_settings as conf
from ..context import AbortReason, JobContext
from ..db import ClaimedJob, LivenessToken, Outcome, Recorded, driver_for
from ..db.locking import row_locked
from ..flow.backpressure import Backpressure
from ..flow.claimer import Claimer
from ..maintenance.maintainer import RELEASED, Maintainer
from ..models import Job
from ..states import Status
from ..stats import counters as stats_counters
from ..workflow import release
from . import shutdown, unheld
from .ahead import AheadBuffer
from .batch import Batch, Batches
from .completer import Completer
from .ledger import Ledger
from .planner import ClaimPlanner
from .processes import ChildLimits, ProcessPool, SlotHost
from .registration import Registration
from .slots import SlotPool

logger = logging.getLogger("django_workqueue.worker")

_MAX_ERROR_BACKOFF = 5.0

# The steps of ``Worker._tick`` that write outcomes and claim: the pass itself.
_PASS_STEPS = frozenset({"_fill", "_write_and_claim", "_flush"})

#: What the control thread hands a slot: a job, a batch, or None (the slot ends).
InboxItem = tuple[ClaimedJob, RunningJob] | Batch | None


class Worker:
    """Runs jobs from ``queues`` with ``concurrency`` slots until stopped.

    ``queue_slots`` gives each queue its own slots instead; with ``max_concurrency`` the slots
    autoscale from ``concurrency`` up to it (see ``slots.py``).

    >>> Worker(queues=["default"], concurrency=4, burst=True).run()
    >>> Worker(queue_slots={"default": 8, "mail": 2}).run()
    >>> Worker(concurrency=2, max_concurrency=32).run()
    """

    def __init__(
        self,
        *,
        queues: Sequence[str] | None = None,
        concurrency: int = 1,
        burst: bool = False,
        wait_scheduled: float | None = None,
        max_jobs: int | None = None,
        poll_interval: float | None = None,
        worker_id: str | None = None,
        grace_seconds: float | None = None,
        queue_slots: Mapping[str, int] | None = None,
        max_concurrency: int | None = None,
        pool: str = "threads",
        child_limits: ChildLimits | None = None,
    ) -> None:
        self.queues = list(queue_slots or queues or conf.QUEUES)
        self.burst = burst
        if wait_scheduled is not None and (not burst or wait_scheduled < 0):
            raise ValueError("wait_scheduled is a number of seconds >= 0, and needs burst=True")
        self.wait_scheduled = wait_scheduled
        self._scheduled_at = math.inf  # (monotonic) the next job a burst waits for is due
        self.max_jobs = max_jobs
        self.poll_interval = float(poll_interval or conf.POLL_INTERVAL)
        self.id = worker_id or str(uuid.uuid4())
        self.grace_seconds = float(
            conf.SHUTDOWN_GRACE_SECONDS if grace_seconds is None else grace_seconds
        )
        self.alias = conf.DATABASE
        self.driver = driver_for(self.alias)
        self.leases = LeaseKeeper(self.driver, self.id)
        self.wake = threading.Event()
        self.stopping = threading.Event()
        self.started = threading.Event()
        self.ledger = Ledger()  # the jobs this worker holds, and its counts (ledger.py)
        self.completer = Completer(self.driver, self.id)
        self._inbox: queue_module.SimpleQueue[InboxItem] = queue_module.SimpleQueue()  # slots
        self.batches = Batches(  # batch tasks: a whole batch per slot (batch.py)
            self.driver, self.id, self.queues, ledger=self.ledger, inbox=self._inbox,
            wake=self.wake, leases=self.leases, completer=self.completer,
            event_loop=self._event_loop, when_committed=self._when_committed,
            generation=lambda: self._db_generation,
        )  # fmt: skip
        self._db_generation = 0  # bumped when the control thread loses its connection
        self._session: object | None = None  # the control connection last configured
        self.pool = SlotPool.build(
            self._slot, self._inbox, concurrency, max_concurrency=max_concurrency,
            queue_slots=queue_slots,
        )  # fmt: skip
        self.concurrency = self.pool.size
        self._slots = self.pool.threads
        # WORKQUEUE["CLAIM_AHEAD"]: jobs claimed beyond the free slots (ahead.py). Per-queue
        # budgets count the jobs handed to slots by queue: a buffer shared by every slot
        # would run past them. The autoscaler grows on claims that fill the free slots: the
        # buffer would hide that demand. Neither kind of worker claims ahead.
        self.ahead = AheadBuffer(0 if queue_slots or max_concurrency else None)
        self._requested: int | None = None  # slots asked for by operations.scale_worker
        self.backpressure = Backpressure.from_settings(self.id)
        self._loop: AsyncLoop | None = None
        self._listener: object | None = None
        self.registration = Registration(
            self.alias, self.id, self.queues, self.concurrency, queue_slots=queue_slots,
            concurrency_range=(concurrency, max_concurrency) if max_concurrency else None,
            liveness=self._liveness,
        )  # fmt: skip
        # Promoter, reaper, scheduler, retention: run while this worker holds the fleet's lease.
        self.maintainer = Maintainer(
            self.alias, self.id, listening=self._listening, running=self._running_ids,
            wake=self.wake.set, standby=self._standby, stand_by=self._stand_by,
            thread_start=self._serve_this_thread,
        )  # fmt: skip
        self._error_backoff = 0.0
        self._connection_lost = False  # the last pass failed because the connection is gone
        # A connection was lost since the jobs leased to this worker were last compared with
        # its ledger: a claim may have committed with its answer lost (unheld.py).
        self._unheld_possible = False
        self._claims_since: dt.datetime | None = None  # the database's clock before any claim
        self._starts: list[Callable[[], None]] | None = None  # the pass's claims, to start
        self._in_transaction_next = False  # a one-statement pass kept outcomes back
        self.misconfigured: str | None = None
        """Why the worker stopped on a setting it cannot work with (runworker exits 1)."""
        self.claimer = Claimer(self.driver, self.id)  # plain and flow-controlled jobs
        if pool not in ("threads", "processes"):
            raise ValueError(f"pool must be 'threads' or 'processes', got {pool!r}")
        self.pool_kind = pool
        # --pool processes: each slot thread runs its jobs in a child process (processes.py).
        self.processes = ProcessPool(child_limits or ChildLimits()) if pool == "processes" else None
        # A process pool claims before it writes the outcomes, each on its own: a child that
        # handed back an outcome idles until its slot gets a job, and a claim alone is one
        # round trip, where the pass's transaction (``_write_and_claim``) is four before its
        # jobs start. Threads share one core: the transaction's fewer round trips win.
        self._claim_first = self.processes is not None
        # What a pass claims, and when (planner.py), with the claim-ahead buffer.
        self.planner = ClaimPlanner(
            self.driver, self.id, self.queues, ledger=self.ledger, pool=self.pool,
            ahead=self.ahead, batches=self.batches, claimer=self.claimer,
            backpressure=self.backpressure, leases=self.leases, inbox=self._inbox,
            stopping=self.stopping, wake=self.wake, slots=lambda: self.concurrency,
            children_ready=self._children_ready, listening=self._listening,
            promote=lambda: self.maintainer.promoter.run_once(), on_progress=self._on_progress,
            when_committed=self._when_committed, in_pass=lambda: self._starts is not None,
            burst=burst, max_jobs=max_jobs, poll_interval=self.poll_interval,
        )  # fmt: skip
        load_middlewares()  # WORKQUEUE["MIDDLEWARE"]: a bad path fails here, not in a job

    # --- public ---------------------------------------------------------------------------

    def run(self) -> int:
        """Run until stopped (or, with ``burst``/``max_jobs``, until done); return an exit code."""
        if self.processes is not None:  # claims wait for them (see ProcessPool)
            self.processes.start(self.id, self.pool.size, self._children_started)
        outer = getattr(serving, "worker", None)
        serving.worker = self  # this thread is the control thread: its connections are ours
        try:
            self._start()
            try:
                while not self.stopping.is_set():
                    claimed = self._tick()
                    if self._finished_work(claimed):
                        break
                    free = self.concurrency - self.running_count
                    if claimed and free > 0 and self.planner.backlog and not self._error_backoff:
                        self.planner.poll_now = True
                        continue  # a full claim came back: more may be waiting
                    if self._error_backoff:  # wake-ups must not cut a backoff short
                        self.stopping.wait(self._backoff_for())
                        self.planner.poll_now = True
                    else:
                        # Cleared only once seen: a wake-up that comes after a wait timed out
                        # stays set for the next wait, never cleared unseen.
                        self.planner.poll_now = self.wake.wait(self._sleep_for())
                        if self.planner.poll_now:
                            self.wake.clear()
            finally:
                signalling.worker_event(signals.worker_stopping, self)
                self.shutdown_sequence().drain_and_stop()
                signalling.worker_event(signals.worker_stopped, self)
        finally:
            serving.worker = outer
        return 0

    def stop(self) -> None:
        """Stop claiming, let running jobs finish within the grace period, then return."""
        self.stopping.set()
        self.wake.set()

    def shutdown_sequence(self) -> shutdown.Shutdown:
        """The shutdown sequence over this worker's parts as they are now (``shutdown.py``)."""
        return shutdown.Shutdown(
            owner=self.id, alias=self.alias, driver=self.driver, grace_seconds=self.grace_seconds,
            ledger=self.ledger, ahead=self.ahead, completer=self.completer, leases=self.leases,
            maintainer=self.maintainer, registration=self.registration, pool=self.pool,
            wake=self.wake, flush=self._flush, listener=self._listener, loop=self._loop,
        )  # fmt: skip

    def _children_ready(self) -> bool:
        """Whether the slots can take jobs: a process pool's children have imported the
        project (claims wait for them)."""
        return self.processes is None or self.processes.ready.is_set()

    def _children_started(self, ok: bool) -> None:
        if not ok:  # the project cannot be imported in a child: nothing could run
            logger.error("worker %s: %s", self.id, self.processes and self.processes.failed)
            self.stop()
        self.wake.set()

    @property
    def session_name(self) -> str:
        """The name of this worker's database sessions (PostgreSQL's ``application_name``)."""
        return f"workqueue:{self.id}"

    @property
    def running_count(self) -> int:
        """Jobs this worker holds a lease on (running, or finished and not yet recorded)."""
        return len(self.ledger)

    # The ledger's state under the names tests and tools read (``ledger.py``).

    @property
    def claimed_count(self) -> int:
        return self.ledger.claimed_count

    @property
    def finished_count(self) -> int:
        return self.ledger.finished_count

    @property
    def _running(self) -> dict[int, RunningJob]:
        return self.ledger.running

    @property
    def _lock(self) -> threading.Lock:
        return self.ledger.lock

    @property
    def _executing(self) -> int:
        return self.ledger.executing

    @_executing.setter
    def _executing(self, value: int) -> None:
        self.ledger.executing = value

    @property
    def _poll_now(self) -> bool:
        """Whether the next pass claims (the planner's; tests set it)."""
        return self.planner.poll_now

    @_poll_now.setter
    def _poll_now(self, value: bool) -> None:
        self.planner.poll_now = value

    # --- control loop ---------------------------------------------------------------------

    def _start(self) -> None:
        try:
            self._ensure_session()  # names the session and registers the worker
            self.maintainer.scheduler.sync()  # WORKQUEUE["SCHEDULES"], @task(cron=...): the table
        except Exception as exc:  # a locked or restarting database: the ticks retry it
            logger.warning("worker %s: could not register or sync yet (%s)", self.id, exc)
            connections[self.alias].close()
        self.pool.start()
        wakeup.register(self.wake, self.queues)
        if conf.LISTEN_NOTIFY and self.driver.supports_listen_notify:
            self._listener = self.driver.listener(
                self._on_ready, self._on_abort, self.session_name,
                on_standby=self.maintainer.standby_changed,
            )  # fmt: skip
        logger.info(
            "worker %s started: queues=%s concurrency=%s pool=%s", self.id, self.queues,
            self.pool.queue_slots or self.registration.concurrency_range or self.concurrency,
            self.pool_kind,
        )  # fmt: skip
        self.started.set()
        signalling.worker_event(signals.worker_started, self)

    def _tick(self) -> int:
        """One pass: heartbeat, progress, outcomes, maintenance, claims. Returns # claimed.

        Each step is guarded on its own, so one failing write (a row another session holds
        locked, a value the database refuses) never stops the heartbeat, the maintenance or
        the claims; a lost connection ends the pass and backs off.
        """
        claimed = 0
        self.planner.last_fill = (0, 0)
        failed = False
        self._connection_lost = False
        # A thread pool's maintenance comes before the pass's transaction, never inside it (its
        # own transactions), and what the promoter makes ready the pass's claim can take.
        claim: Callable[[], int] = self._fill if self._claim_first else self._write_and_claim
        passes: tuple[Callable[[], object], ...] = (
            (claim, self._maintain, self._flush) if self._claim_first else (self._maintain, claim)
        )
        steps = (self._ensure_session, self._give_back_unheld, self._heartbeat,
                 self._write_progress, *passes, self._scale)  # fmt: skip
        for step in steps:
            try:
                result = step()
            except Exception as exc:
                failed = True
                if self._step_failed(step.__name__, exc):
                    break  # the connection is gone: the other steps would fail the same way
            else:
                if step is claim:  # the one object: no bound method made to compare
                    claimed = int(result)  # type: ignore[call-overload]
        if not failed:
            self._error_backoff = 0.0
        return claimed

    def _step_failed(self, step: str, exc: Exception) -> bool:
        """Log a failed step and back off; return whether the connection was lost. A pass's
        write or claim refused for a setting (``ImproperlyConfigured``: a pooler that loses
        prepared statements, say) would fail the same way forever: the worker stops, and
        runworker exits 1 with the reason (``misconfigured``)."""
        if isinstance(exc, ImproperlyConfigured) and step in _PASS_STEPS:
            self.misconfigured = f"{step.lstrip('_')}: {exc}"
            logger.error("worker %s: stopping: %s", self.id, self.misconfigured)
            self.stop()
            return True
        lost = is_connection_error(self.driver, exc)
        self._error_backoff = min(max(self._error_backoff * 2, 0.1), _MAX_ERROR_BACKOFF)
        if lost:
            self._unheld_possible = True
            connections[self.alias].close()
            self._db_generation += 1  # slots check their own connections before their next job
            self._connection_lost = True
            self._doubt_liveness()
        logger.warning(
            "worker %s: %s failed (%s: %s); retrying in %.1fs",
            self.id, step.lstrip("_"), type(exc).__name__, exc, self._backoff_for(),
        )  # fmt: skip
        return lost

    def _backoff_for(self) -> float:
        """How long to wait after a failed pass.

        The wait never runs past a renewal that is not due yet: leases depend on it. Once a
        renewal is due and the connection is lost, every step fails alike, and retrying sooner
        than the backoff only hammers a database that is down or refusing us: the whole
        backoff is waited (0.1 s doubling to 5 s), but never longer than the leases' renewal
        interval, so that they are renewed soon after the database is back. (A renewal that
        failed stays due, see ``LeaseKeeper.renew``.)
        """
        until_renewal = self.leases.next_renewal - time.monotonic()
        if self._connection_lost and until_renewal <= 0:  # the renewal itself is failing
            with self.ledger.lock:
                renewal_interval = self.leases.interval(self.ledger.running)
            return max(0.05, min(self._error_backoff, renewal_interval))
        return max(0.05, min(self._error_backoff, until_renewal))

    def _ensure_session(self) -> None:
        connection = connections[self.alias]
        if connection.connection is None or connection.connection is not self._session:
            connection.ensure_connection()
            # Named here too: the connection may predate run() (runworker's check of the tables).
            self.driver.name_session(self.session_name, connection)
            self._session = connection.connection
        if self._claims_since is None:  # before this process's first claim (unheld.py)
            self._claims_since = self.driver.now()
        if not self.registration.registered:
            self.registration.register()
        self.registration.declare_liveness()

    def _give_back_unheld(self) -> None:
        """After a lost connection, before this pass claims: give back the jobs leased to this
        worker by a claim whose answer was lost with the connection (unheld.py)."""
        if self._unheld_possible and self._claims_since is not None:
            self._unheld_possible = not unheld.give_back_unheld(
                self.driver, self.id, self.ledger, self._claims_since
            )
            if not self._unheld_possible:
                self.planner.poll_now = True  # what was given back is ready: claim it

    def _liveness(self) -> LivenessToken | None:
        """The liveness token this process holds now: its LISTEN session's key (PostgreSQL),
        or what the driver takes from the process itself (SQLite: its pid on this host)."""
        if self._listener is None:
            return self.driver.liveness_token()
        held = getattr(self._listener, "held", None)
        return held() if held is not None else None

    def _doubt_liveness(self) -> None:
        """This worker's connection was lost, or jobs were taken from it: its LISTEN session
        may have been ended by the server unseen (a partition), its key free and the worker
        taken for dead. Its row shows no key until the listener has proven its session or
        taken the key again (``Listener.doubt``), so that what it claims meanwhile is not
        reaped as a dead worker's."""
        doubt = getattr(self._listener, "doubt", None)
        if doubt is not None:
            doubt()

    def _standby(self) -> bool:
        """Whether this worker may watch the maintainer: its listener holds a standby slot, or
        it has no listener (a watch there costs no connection: SQLite's pid, or none at all)."""
        if self._listener is None:
            return True
        return getattr(self._listener, "standby", None) is not None

    def _stand_by(self, wanted: bool) -> None:
        want = getattr(self._listener, "want_standby", None)
        if want is not None:
            want(wanted)

    def _heartbeat(self) -> None:
        now = time.monotonic()
        running = self.ledger.snapshot()
        self._check_timeouts(running, now)
        if not self.leases.due(now):
            return
        if self.leases.renew(running):
            self._doubt_liveness()
        self._requested = self.registration.beat(running=len(running))

    def _maintain(self) -> None:
        """The maintenance services that are due, if this worker is the fleet's maintainer:
        scheduled jobs whose time has come become ready, expired leases are reaped, due cron
        ticks fire, old finished jobs are deleted."""
        if self.maintainer.run_if_due():
            self.wake.set()  # jobs may be ready: claim them on the next pass

    def _running_ids(self) -> set[int]:
        """The jobs this worker runs now (its reaper spares their leases)."""
        return self.ledger.ids()

    def _listening(self) -> bool:
        """Whether the LISTEN connection is up (NOTIFY wakes this worker)."""
        connected = getattr(self._listener, "connected", None)
        return connected is not None and connected.is_set()

    def _on_progress(self, context: JobContext) -> None:
        if self.completer.report(context):  # otherwise it waits for its turn (progress_due_at)
            self.wake.set()

    def _write_progress(self) -> None:
        self.completer.write_progress()

    def _write_and_claim(self) -> int:
        """Write the outcomes slots handed over, then claim for the free slots (``_fill``): one
        transaction, the write first (the lock order: workflow rows, then the jobs'). Returns
        # claimed.

        Whatever ends that transaction early rolls all of it back: the outcomes are put back,
        the claimed rows are ready again (their jobs start only on commit, see ``_fill``). A
        lost connection (or SQLite's database lock) then ends the pass, the outcomes kept for
        the next; anything else (a refused value, a lock a dependent's row met past its
        bounded wait, a failing claim) is done the way it is alone: the outcomes written by
        ``_flush``, each alone if the batch fails (``db/locking.py``), then a claim of its own.
        """
        outcomes = self.completer.take_outcomes()
        if not outcomes:
            return self._fill()
        if self._in_one_statement(outcomes):
            return self._write_and_claim_at_once(outcomes)
        self._starts, self.planner.began_in_pass = [], []
        try:
            with transaction.atomic(using=self.alias):
                recorded = self.completer.record_in_pass(outcomes)
                self.planner.poll_now = True  # a retry without delay is ready again: claim
                self.planner.finishing = {
                    (o.job_id, o.attempt) for o in outcomes if o.job_id not in recorded.busy
                }
                claimed = self._fill()
                if self.driver.transaction_failed():
                    # A claim failed after another had taken jobs and was let through, as is
                    # right where each claim commits alone: here its COMMIT would roll back
                    # the whole pass unseen. Apart, then.
                    raise transaction.TransactionManagementError("a claim of the pass failed")
        except Exception as exc:
            self.planner.finishing, self._starts = set(), None  # rolled back: nothing starts
            self.completer.put_back(outcomes)
            # Buffered jobs the slots took run all the same: written as begun again.
            self.ahead.put_back([], self.planner.began_in_pass)
            self.planner.began_in_pass = []
            return self._apart(exc, "transaction")
        self.planner.began_in_pass = []
        self._settle_and_start(outcomes, recorded)
        return claimed

    def _apart(self, exc: Exception, what: str) -> int:
        """The pass's ``what`` (its transaction, or its one statement) failed and nothing of
        it was kept (its outcomes are put back): a lost connection ends the pass there;
        anything else, the outcomes are written by ``_flush`` (each alone if the batch fails,
        ``db/locking.py``), then a claim of its own. Returns # claimed."""
        if is_transient(exc) and not row_locked(self.driver, exc):
            raise exc
        logger.info(
            "worker %s: the pass's %s failed (%s); writing its outcomes, then claiming, each "
            "on its own", self.id, what, exc,
        )  # fmt: skip
        self.planner.poll_now = True  # the claim this pass still owes
        self._flush()
        return self._fill()

    def _settle_and_start(self, outcomes: list[Outcome], recorded: Recorded) -> None:
        """The pass was kept: settle its outcomes, then start the jobs it claimed."""
        starts, self.planner.finishing, self._starts = self._starts or [], set(), None
        try:
            self._forget(*self.completer.settle(outcomes, recorded))
        finally:  # committed: the jobs are ours, whatever the bookkeeping met
            for start in starts:  # after the forgetting: a job claimed again replaces its entry
                try:
                    start()
                except Exception:
                    logger.exception("worker %s: could not start the jobs it claimed", self.id)

    def _in_one_statement(self, outcomes: list[Outcome]) -> bool:
        """Whether this pass may write, count and claim in one autocommitted statement
        (``Driver.record_and_claim``): plain endings of jobs outside workflows, nothing else
        to do in the write's transaction (nothing put back in line to announce, no claim-ahead
        marks), and one plain claim. Signal receivers and statistics listeners hear of the
        outcomes after the statement as after the transaction (``_kept_at_once``)."""
        if self._in_transaction_next:  # the last one kept outcomes back: see below
            self._in_transaction_next = False
            return False
        if not (
            self.driver.supports_record_and_claim and self.claimer.single_plain
            and not self.ahead.enabled and not self.pool.queue_slots
            and not self.batches.served and release.rows_only(outcomes)
        ):  # fmt: skip
            return False
        with self.ledger.lock:
            running = self.ledger.running
            return all(
                (item := running.get(o.job_id)) is not None
                and item.context.attempt == o.attempt and item.context.job.workflow_id is None
                for o in outcomes
            )  # fmt: skip

    def _write_and_claim_at_once(self, outcomes: list[Outcome]) -> int:
        """``_write_and_claim`` in one statement: the plain claim of ``_fill`` carries the
        outcomes' write and its statistics (``Claimer.carry``), or they go alone if the pass
        claims nothing. The jobs claimed start once the statement returned (kept); if it
        failed, nothing of it was kept: the outcomes are put back and nothing starts, as when
        the pass's transaction rolls back."""
        self._starts = []
        self.planner.poll_now = True
        # None of these endings puts its job back: every one is finishing (burst: done).
        self.planner.finishing = {(o.job_id, o.attempt) for o in outcomes}
        try:
            self.claimer.carry(stats_counters.counted_write(self.id, outcomes))
            claimed = self._fill()
            self.claimer.send_carried()
        except Exception as exc:
            recorded = self.claimer.carried()
            if recorded is not None:  # kept (committed): what failed came after it, and the
                self._kept_at_once(outcomes, recorded)  # jobs it claimed are ours
                raise
            self.planner.finishing, self._starts = set(), None
            self.completer.put_back(outcomes)
            return self._apart(exc, "statement")
        recorded = self.claimer.carried()
        if recorded is None:  # pragma: no cover - send_carried sends it, or raises
            raise RuntimeError("the pass's write was never sent")
        # Outcomes kept back (a row another session holds, or one that joined a workflow
        # since its claim: the statement writes no workflow effects) go through the pass's
        # transaction next time, which writes them as release.record does.
        self._in_transaction_next = bool(recorded.busy)
        self._kept_at_once(outcomes, recorded)
        return claimed

    def _kept_at_once(self, outcomes: list[Outcome], recorded: Recorded) -> None:
        """The one statement returned, so it committed: this process hears of what it wrote
        now (``release.tell_written``, what the pass's transaction tells on its commit), then
        the pass settles and starts what it claimed."""
        try:
            release.tell_written(self.alias, self.id, outcomes, recorded)
        finally:
            self._settle_and_start(outcomes, recorded)

    def _when_committed(self, start: Callable[[], None]) -> None:
        """Run ``start`` (it hands jobs just claimed to the slots) once their claim is kept:
        after the pass's transaction (``_write_and_claim``), or at once outside one."""
        if self._starts is None:
            start()
        else:
            self._starts.append(start)

    def _flush(self) -> tuple[list[Outcome], set[tuple[int, int]]]:
        """Write the outcomes slots handed over, then forget the jobs that are done."""
        done, written = self.completer.write_outcomes()
        if done:  # a retry without delay is ready again: claim
            self.planner.poll_now = True
            if self._claim_first:  # this pass's claim has run: the next pass claims at once
                self.wake.set()
        return self._forget(done, written)

    def _forget(
        self, done: list[Outcome], written: set[tuple[int, int]]
    ) -> tuple[list[Outcome], set[tuple[int, int]]]:
        """The outcomes ``done`` were dealt with (``written``, or stale): forget their jobs."""
        if any((outcome.job_id, outcome.attempt) not in written for outcome in done):
            self._doubt_liveness()  # the lease was lost: reaped as a dead worker's?
        self.ledger.forget_done(done)
        return done, written

    def _fill(self) -> int:
        """The pass's claim step (``planner.py``); returns # claimed for the free slots."""
        return self.planner.fill()

    def _scale(self) -> None:
        """Apply a ``scale_worker`` request (read by the heartbeat) or the autoscaler's choice,
        and show the slots in the registration row when they changed."""
        before, requested = self.concurrency, self._requested
        busy = self.ledger.busy()
        free, claimed = self.planner.last_fill
        slots = self.pool.rescale(requested, busy=busy, free=free, claimed=claimed, owner=self.id)
        self.concurrency = slots
        if requested is not None or slots != self.registration.concurrency:
            self.registration.record_slots(slots, requested=requested)
            self._requested = None
        if slots > before:  # new slots: claim for them at once
            self.wake.set()

    def _claim(self, queues: Sequence[str], limit: int) -> list[ClaimedJob]:
        """Claim up to ``limit`` jobs of ``queues`` for this worker (``flow/claimer.py``)."""
        return self.claimer.claim(queues, limit)

    def _check_timeouts(self, running: dict[int, RunningJob], now: float) -> None:
        for item in running.values():
            timeout = item.timeout
            if timeout and now - item.started > timeout:
                item.context.abort(AbortReason.TIMEOUT)

    def _finished_work(self, claimed: int) -> bool:
        if self.max_jobs is not None and self.claimed_count >= self.max_jobs:
            return self.running_count == 0
        if not (self.burst and self.planner.drained and not self._error_backoff):
            return False
        return self.wait_scheduled is None or not self._scheduled_soon()

    def _scheduled_soon(self) -> bool:
        """``wait_scheduled``: whether a job of this worker's queues is scheduled to run within
        that many seconds (a retry's backoff, a snooze, a delay); the burst then sleeps until
        it is due, and the burst's promoter makes it ready."""
        self._scheduled_at = math.inf
        within = timezone.now() + dt.timedelta(seconds=self.wait_scheduled or 0)
        first = (
            Job.objects.using(self.alias)
            .filter(queue__in=self.queues, status=Status.SCHEDULED, run_after__lte=within)
            .order_by("run_after")
            .values_list("run_after", flat=True)
            .first()
        )
        if first is None:
            return False
        wait = max(0.0, (first - timezone.now()).total_seconds())
        self._scheduled_at = time.monotonic() + wait
        return True

    def _sleep_for(self) -> float:
        if self._error_backoff:
            return self._error_backoff
        # Never past the next renewal or the next maintenance run: with a long poll interval
        # (NOTIFY does the waking) scheduled jobs must still be promoted on time.
        now = time.monotonic()
        self.planner.claim_deadline = self.planner.claim_due_at(now)
        due = min(
            self.planner.claim_deadline,
            self.leases.next_renewal,
            self.maintainer.next_run,
            self.completer.progress_due_at(),  # a throttled progress report's turn
            self.completer.outcomes_due_at(),  # outcomes kept for a row that was locked
            self._scheduled_at,  # --wait-scheduled: the job it waits for is due
            self.planner.deferred_pass_due(now),  # takes and outcomes no slot woke it for
        )
        return max(0.0, due - now)

    def _on_ready(self, queue: str | None) -> None:
        """A NOTIFY: ``queue`` has new ready jobs (None: the listener reconnected, poll), or
        the maintenance lease was released (``RELEASED``).

        Every enqueue notifies its queue, delayed jobs too: the maintainer promotes soon,
        whichever queues it serves."""
        if queue == RELEASED:
            self.maintainer.check_soon()
            self.wake.set()
        elif queue is None or queue in self.queues:
            self.maintainer.promote_soon()
            self.wake.set()
        elif self.maintainer.promote_soon():
            self.wake.set()

    def _on_abort(self, job_id: int, reason: str) -> None:
        """A NOTIFY: the job must stop (e.g. ``cancel_job``); ignored unless it runs here."""
        item = self.ledger.get(job_id)
        if item is None or item.context.finished:
            return
        try:
            why = AbortReason(reason)
        except ValueError:
            logger.warning("job %s: unknown abort reason %r in a notification", job_id, reason)
            return
        if item.context.abort(why):
            logger.info("job %s: %s (notified)", job_id, why)

    # --- slots ----------------------------------------------------------------------------

    def _serve_this_thread(self) -> None:
        """The calling thread serves this worker: its connections are named after it."""
        serving.worker = self

    def _slot(self) -> None:
        self._serve_this_thread()
        generation = self._db_generation
        child = self.processes.slot(self.slot_host()) if self.processes is not None else None
        freed = False  # the slot ran a job and handed its outcome over: the control thread
        # must learn of it (_take)
        while True:
            handed = self._take(freed)
            freed = False
            if handed is None:
                if not self.pool.retire():  # meant for a slot that a later grow kept
                    continue
                if child is not None:
                    child.close()
                connections.close_all()  # this thread's connections end with it
                return
            if isinstance(handed, Batch):
                generation = self.batches.serve(handed, generation)
                continue
            job, item = handed
            outcome: Outcome | None = None
            pending = False
            try:
                if generation != self._db_generation:  # the database restarted or dropped us
                    generation = self._db_generation
                    close_unusable_connections()
                if child is not None:
                    outcome, pending = child.run(job, item)
                else:
                    loop = self._event_loop() if item.is_async else self._loop
                    outcome, pending = run(job, item.context, self.driver, loop)
                if outcome is not None and pending:
                    outcome.encoded()  # here, not on the control thread that batches them
            except Exception:
                logger.exception("job %s: the worker failed to run it", job.id)
            finally:
                try:
                    tidy_connections(self.alias)
                except Exception:
                    logger.exception("job %s: could not tidy the slot's connections", job.id)
                with self.ledger.lock:
                    self.ledger.executing -= 1
                    self.pool.ended(job.queue)
                    if outcome is not None:
                        self.backpressure.count_outcome(outcome.kind)
                    if outcome is not None and pending:
                        item.context.finished = True
                        self.completer.hand_over(outcome, item.started)
                    else:  # recorded in its own transaction, or nothing left to write
                        if outcome is not None:  # atomic: reported by the control thread
                            self.completer.written_elsewhere(outcome, item.started)
                        self.ledger.end(job.id, item)  # not a later attempt's entry
                freed = True

    def slot_host(self) -> SlotHost:
        """What a process slot needs of this worker (``processes.SlotHost``)."""
        return SlotHost(
            worker_id=self.id, stopping=self.stopping, stop=self.stop,
            generation=lambda: self._db_generation, on_progress=self._on_progress,
        )  # fmt: skip

    def _take(self, freed: bool) -> InboxItem:
        """A slot's next job: a buffered one at once if there is one (ahead.py), else what the
        control thread hands over, waiting for it.

        A slot ``freed`` by a job it ran wakes the control thread to write its outcome and
        claim for it, unless it took a buffered job and a pass comes soon anyway
        (``ClaimPlanner.take``): under a backlog, one wake-up per pass, not one per job."""
        handed = self.planner.take(freed=freed)
        if handed is not None:
            return handed
        # Set once per wait is enough: the control thread clears it before the pass that
        # flushes, and this slot's outcome was handed over before the look.
        if freed and not self.wake.is_set():
            self.wake.set()
        return self._inbox.get()

    def _event_loop(self) -> AsyncLoop:
        """The event loop async tasks run on, started by the first that needs it."""
        with self.ledger.lock:
            if self._loop is None:
                self._loop = AsyncLoop()
            return self._loop
