"""The comparison table printed at the end of a run, and the targets of issues 3, 8, 15, 16
and 17."""

from __future__ import annotations

from typing import Any

# metric -> (label, unit, "higher" or "lower" is better)
METRICS: dict[str, tuple[str, str, str]] = {
    "enqueue_single": ("enqueue, one job per transaction", "jobs/s", "higher"),
    "enqueue_bulk": ("enqueue, bulk API", "jobs/s", "higher"),
    "raw_insert": ("reference: raw psycopg INSERT, one per transaction", "rows/s", "higher"),
    "enqueue_single_vs_raw": (
        "enqueue single / raw INSERT, paired per repetition",
        "ratio",
        "higher",
    ),
    "enqueue_single_fast": (
        "enqueue, one job per transaction, synchronous_commit=off",
        "jobs/s",
        "higher",
    ),
    "raw_insert_fast": (
        "reference: raw psycopg INSERT, synchronous_commit=off",
        "rows/s",
        "higher",
    ),
    "enqueue_single_vs_raw_fast": (
        "enqueue single / raw INSERT, synchronous_commit=off, paired",
        "ratio",
        "higher",
    ),
    "drain": ("drain, one worker process, best setting", "jobs/s", "higher"),
    "db_drain_wal": ("drain: WAL per job (one worker, best setting)", "B/job", "lower"),
    "db_drain_statements": (
        "drain: statements per job, as the server logs them",
        "stmts/job",
        "lower",
    ),
    "db_drain_commits": ("drain: transactions per job", "xacts/job", "lower"),
    "db_drain_pg_cpu_ms_per_1000": (
        "drain: PostgreSQL backends' CPU per 1,000 jobs",
        "ms",
        "lower",
    ),
    **{
        f"db_drain_{key}_batch{n}": (f"drain: {label}, PgQueuer batch_size={n}", unit, "lower")
        for n in (100, 500)
        for key, label, unit in (
            ("wal", "WAL per job", "B/job"),
            ("statements", "statements per job", "stmts/job"),
            ("commits", "transactions per job", "xacts/job"),
            ("pg_cpu_ms_per_1000", "backends' CPU per 1,000 jobs", "ms"),
        )
    },
    "db_enqueue_wal": ("bulk fill (calls of 5,000): WAL per job", "B/job", "lower"),
    "db_enqueue_statements": ("bulk fill: statements per job", "stmts/job", "lower"),
    "latency_p50": ("pickup latency p50 (LISTEN/NOTIFY where offered)", "ms", "lower"),
    "latency_p95": ("pickup latency p95 (LISTEN/NOTIFY where offered)", "ms", "lower"),
    "latency_no_notify_p50": ("pickup latency p50, polling only", "ms", "lower"),
    "latency_no_notify_p95": ("pickup latency p95, polling only", "ms", "lower"),
    "claim_small": ("claim of 10 jobs, small backlog", "ms", "lower"),
    "claim_large": ("claim of 10 jobs, large backlog", "ms", "lower"),
    "sustained_first": ("long drain, first slice", "jobs/s", "higher"),
    "sustained_last": ("long drain, last slice", "jobs/s", "higher"),
    "sustained_ratio": ("long drain, last slice / first", "ratio", "higher"),
    "long_drain_first": ("long drain under churn (retention on), first slice", "jobs/s", "higher"),
    "long_drain_last": ("long drain under churn, last slice", "jobs/s", "higher"),
    "long_drain_ratio": ("long drain under churn, last slice / first", "ratio", "higher"),
    "long_drain_size_later": ("long drain: jobs table, 2nd half's peak / steady", "ratio", "lower"),
    "long_drain_size_end": ("long drain: jobs table after retention / steady", "ratio", "lower"),
    "scaling_1": ("drain, 1 runworker process", "jobs/s", "higher"),
    "scaling_2": ("drain, 2 runworker processes", "jobs/s", "higher"),
    "scaling_4": ("drain, 4 runworker processes", "jobs/s", "higher"),
    "sqlite_enqueue_single": ("SQLite: enqueue, one job per transaction", "jobs/s", "higher"),
    "sqlite_enqueue_bulk": ("SQLite: enqueue, bulk API", "jobs/s", "higher"),
    "sqlite_drain": ("SQLite: drain, one worker process, best setting", "jobs/s", "higher"),
}

# Issue 8's engine measurements (bench/engine_metrics.py), on each database.
ENGINE_METRICS: dict[str, tuple[str, str, str]] = {
    "future_backlog_alone": ("due jobs drained alone by runworker --burst --concurrency 8",
                             "jobs/s", "higher"),
    "future_backlog_beside": ("the same drain beside higher-priority future jobs", "jobs/s",
                              "higher"),
    "future_backlog_ratio": ("drain beside future jobs / alone, paired", "ratio", "higher"),
    "idle_poll_empty_p50": ("idle poll (claim of 8 on every queue), no jobs, median", "ms",
                            "lower"),
    "idle_poll_p50": ("idle poll beside future jobs, median", "ms", "lower"),
    "idle_poll_p95": ("idle poll beside future jobs, p95", "ms", "lower"),
    "queue_claim_one_p50": ("claim of 8 from one queue of two, median", "ms", "lower"),
    "queue_claim_two_p50": ("claim of 8 from both queues, median", "ms", "lower"),
    "queue_claim_ratio": ("claim from both queues / from one, paired", "ratio", "lower"),
    "cancel_p50": ("cancel_job to context.cancelled, p50", "ms", "lower"),
    "cancel_p95": ("cancel_job to context.cancelled, p95", "ms", "lower"),
    "cancel_max": ("cancel_job to context.cancelled, max", "ms", "lower"),
    "workflow_fanin": ("workflow: group of N no-ops .then(callback), enqueue to callback start",
                       "ms", "lower"),
    "workflow_fanin_to_last_member": ("workflow fan-in: enqueue to the last member's end", "ms",
                                      "lower"),
    "workflow_fanin_plain": ("the same number of plain no-ops: enqueue to the last end", "ms",
                             "lower"),
    "workflow_fanin_release": ("workflow fan-in: last member's end to callback start", "ms",
                               "lower"),
    "release_cost_plain": ("completion of a batch of plain jobs", "stmts/job", "lower"),
    "release_cost_chain": ("completion of a batch of chain steps, each releasing one",
                           "stmts/job", "lower"),
    "release_cost_fanin": ("completion of a batch of a fan-in's members", "stmts/job", "lower"),
    "release_cost_plain_singly": ("completion of plain jobs one by one", "stmts/job", "lower"),
    "release_cost_chain_singly": ("completion of chain steps one by one", "stmts/job", "lower"),
    "release_cost_fanin_singly": ("completion of a fan-in's members one by one", "stmts/job",
                                  "lower"),
    "flow_claim_plain_p50": ("claim of 8, no flow control, median", "ms", "lower"),
    "flow_claim_concurrency_p50": ("claim of 8 under concurrency=, median", "ms", "lower"),
    "flow_claim_concurrency_per_key_p50": ("claim of 8 under concurrency= per limit_key "
                                           "(many keys), median", "ms", "lower"),
    "flow_claim_rate_p50": ("claim of 8 under rate=, median", "ms", "lower"),
    "flow_claim_fair_p50": ("claim of 8 under fair_key= (many tenants), median", "ms", "lower"),
    "flow_claim_concurrency_ratio": ("claim under concurrency= / plain claim", "ratio", "lower"),
    "flow_claim_concurrency_per_key_ratio": ("claim under per-key concurrency= / plain claim",
                                             "ratio", "lower"),
    "flow_claim_rate_ratio": ("claim under rate= / plain claim", "ratio", "lower"),
    "flow_claim_fair_ratio": ("claim under fair_key= / plain claim", "ratio", "lower"),
    "flow_claim_plain_statements": ("statements per claim, no flow control", "stmts", "lower"),
    "flow_claim_concurrency_per_key_statements": ("statements per claim under per-key "
                                                  "concurrency=", "stmts", "lower"),
    "flow_claim_fair_statements": ("statements per claim under fair_key=", "stmts", "lower"),
    "signals_cost_off": ("drain of no-ops, in-process burst worker, no signal receivers",
                         "jobs/s", "higher"),
    "signals_cost_on": ("the same drain, a no-op receiver on every signal", "jobs/s", "higher"),
    "signals_cost_ratio": ("drain without receivers / with, paired", "ratio", "lower"),
    "signals_gate_ns": ("signal code per job with no receiver", "ns", "lower"),
    "signals_gate_share": ("that code's share of a job's drain time", "%", "lower"),
    **{f"engine_{clock}_c{n}_line_{line}": (
        f"engine alone (null driver), concurrency {n}, per-job line {line}: {what}",
        "µs/job", "lower")
       for n in (8, 32) for line in ("off", "on")
       for clock, what in (("cpu_us", "process CPU"), ("wall_us", "wall time"))},
    "pools_cpu_threads": ("drain of CPU-bound jobs (~20 ms each), --pool threads, best "
                          "concurrency", "jobs/s", "higher"),
    "pools_cpu_processes": ("the same, --pool processes, best concurrency", "jobs/s", "higher"),
    "pools_cpu_ratio": ("CPU-bound drain: processes / threads, paired", "ratio", "higher"),
    "pools_noop_threads": ("drain of no-ops, --pool threads, best concurrency", "jobs/s",
                           "higher"),
    "pools_noop_processes": ("the same, --pool processes, best concurrency", "jobs/s", "higher"),
    "pools_noop_ratio": ("no-op drain: processes / threads, paired", "ratio", "higher"),
    **{f"curve_{kind}_{n}{suffix}": (f"{label}, {n} runworker process{'es' * (n > 1)}{what}",
                                      unit, better)
       for kind, label in (("noop", "drain of no-ops"), ("io", "drain of 5 ms I/O jobs"))
       for n in (1, 2, 4, 8)
       for suffix, what, unit, better in (("", "", "jobs/s", "higher"),
                                          ("_pg_share", ": PostgreSQL's CPU share", "%", "lower"))},
}  # fmt: skip
for _prefix, _vendor in (("", "PostgreSQL"), ("sqlite_", "SQLite")):
    METRICS.update(
        (_prefix + key, (f"{_vendor}: {label}", unit, better))
        for key, (label, unit, better) in ENGINE_METRICS.items()
    )


def _number(value: float, unit: str) -> str:
    if unit == "ratio":
        return f"{value:.2f}"
    if unit.endswith("/job") and value < 1:
        return f"{value:.3f}"
    if unit == "ms" or value < 100:
        return f"{value:,.2f}" if value < 10 else f"{value:,.1f}"
    return f"{value:,.0f}"


def cell(entry: dict[str, Any] | None, unit: str) -> str:
    if not entry:
        return "-"
    text = _number(entry["median"], unit)
    if entry["min"] != entry["max"]:
        text += f" ({_number(entry['min'], unit)}-{_number(entry['max'], unit)})"
    return text


def rows(
    results: dict[str, Any], main: str, peers: list[str], labels: dict[str, str]
) -> list[list[str]]:
    """Header and one row per measured metric: ours, then each peer and our ratio to it."""
    metrics = results["metrics"]
    header = ["metric", "unit", labels.get(main, main)]
    for peer in peers:
        header += [labels.get(peer, peer), f"ratio vs {labels.get(peer, peer)}"]
    lines = [header]
    for key, (label, unit, better) in METRICS.items():
        row_data = metrics.get(key, {})
        if not row_data:
            continue
        ours = row_data.get(main)
        if ours and "ready" in ours:
            label = f"{label} ({ours['ready']:,} ready)"
        if ours and "future" in ours:
            label = f"{label} ({ours['future']:,} future)"
        row = [f"{label} ({better} is better)", unit, cell(ours, unit)]
        for peer in peers:
            theirs = row_data.get(peer)
            row.append(cell(theirs, unit))
            if ours and theirs and theirs["median"]:
                row.append(f"{ours['median'] / theirs['median']:.2f}x")
            else:
                row.append("-")
        lines.append(row)
    return lines


def table(results: dict[str, Any], main: str, peers: list[str], labels: dict[str, str]) -> str:
    metrics = results["metrics"]
    lines = rows(results, main, peers, labels)
    header = lines[0]
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(header))]
    rendered = []
    for index, line in enumerate(lines):
        rendered.append("  ".join(str(value).ljust(widths[i]) for i, value in enumerate(line)))
        if index == 0:
            rendered.append("  ".join("-" * width for width in widths))
    settings = [
        f"  best drain setting of {labels.get(name, name)}: {entry.get('best')}"
        for name, entry in metrics.get("drain", {}).items()
    ]
    return "\n".join([*rendered, "", *settings] if settings else rendered)


def _median(results: dict[str, Any], metric: str, system: str) -> float | None:
    entry = results["metrics"].get(metric, {}).get(system)
    return None if entry is None else float(entry["median"])


def targets(results: dict[str, Any], poll_interval: float) -> list[dict[str, Any]]:
    """Issues 3 and 8's performance targets, each with the measured value and whether it is met."""
    wq = "workqueue"

    def ratio(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None or b == 0 else a / b

    poll_ms = poll_interval * 1000 + 10
    rows = [
        ("drain ≥ 1.2x PgQueuer's best", ratio(_median(results, "drain", wq),
         _median(results, "drain", "pgqueuer")), 1.2, "higher", "x"),
        ("pickup p95 with LISTEN/NOTIFY ≤ 5 ms", _median(results, "latency_p95", wq), 5.0,
         "lower", " ms"),
        (f"pickup p95 polling only ≤ poll interval + 10 ms ({poll_ms:.0f} ms)",
         _median(results, "latency_no_notify_p95", wq), poll_ms, "lower", " ms"),
        ("bulk enqueue ≥ 80,000 jobs/s", _median(results, "enqueue_bulk", wq), 80_000.0,
         "higher", " jobs/s"),
        ("single enqueue ≥ 70% of raw INSERT per transaction",
         _median(results, "enqueue_single_vs_raw", wq), 0.7, "higher", "x"),
        ("the same with synchronous_commit=off (fast commits)",
         _median(results, "enqueue_single_vs_raw_fast", wq), 0.7, "higher", "x"),
        ("claim latency at large backlog ≤ 1.3x small", ratio(_median(results, "claim_large", wq),
         _median(results, "claim_small", wq)), 1.3, "lower", "x"),
        ("last slice of long drain ≥ 0.8x first", _median(results, "sustained_ratio", wq), 0.8,
         "higher", "x"),
        ("4 processes ≥ 1.6x one", ratio(_median(results, "scaling_4", wq),
         _median(results, "scaling_1", wq)), 1.6, "higher", "x"),
        ("issue 16: WAL per drained job ≤ PgQueuer's", ratio(_median(results, "db_drain_wal", wq),
         _median(results, "db_drain_wal", "pgqueuer")), 1.0, "lower", "x"),
        ("issue 16: statements per drained job ≤ PgQueuer's",
         ratio(_median(results, "db_drain_statements", wq),
               _median(results, "db_drain_statements", "pgqueuer")), 1.0, "lower", "x"),
        ("SQLite drain ≥ 2,000 jobs/s", _median(results, "sqlite_drain", wq), 2000.0, "higher",
         " jobs/s"),
        ("issue 32: statements per drained job ≤ 1.5x PgQueuer's at batch 100",
         ratio(_median(results, "db_drain_statements", wq),
               _median(results, "db_drain_statements_batch100", "pgqueuer")), 1.5, "lower", "x"),
        ("issue 32: transactions per drained job ≤ 1.5x PgQueuer's at batch 100",
         ratio(_median(results, "db_drain_commits", wq),
               _median(results, "db_drain_commits_batch100", "pgqueuer")), 1.5, "lower", "x"),
        ("issue 32: WAL per drained job ≤ PgQueuer's at batch 100",
         ratio(_median(results, "db_drain_wal", wq),
               _median(results, "db_drain_wal_batch100", "pgqueuer")), 1.0, "lower", "x"),
        ("issue 32: PostgreSQL CPU per 1,000 jobs ≤ PgQueuer's at batch 100",
         ratio(_median(results, "db_drain_pg_cpu_ms_per_1000", wq),
               _median(results, "db_drain_pg_cpu_ms_per_1000_batch100", "pgqueuer")), 1.0,
         "lower", "x"),
        ("issue 32: long drain under churn, last slice ≥ 0.9x first",
         _median(results, "long_drain_ratio", wq), 0.9, "higher", "x"),
        ("issue 32: jobs table once retention has run ≤ 1.2x its steady-state size",
         _median(results, "long_drain_size_end", wq), 1.2, "lower", "x"),
        ("issue 32: engine alone ≤ 40 µs/job (null driver, CPU, concurrency 8, line off)",
         _median(results, "sqlite_engine_cpu_us_c8_line_off", wq), 40.0, "lower", " µs"),
    ]  # fmt: skip
    rows += _engine_targets(results)
    rows.append(
        (
            "issue 17: 50 idle workers ≤ 5 queries/s in total (with NOTIFY)",
            _median(results, "idle_fleet_50_per_s", wq),
            5.0,
            "lower",
            "/s",
        )
    )
    out = []
    for label, measured, target, better, unit in rows:
        met = None
        if measured is not None:
            met = measured >= target if better == "higher" else measured <= target
        out.append({"target": label, "measured": measured, "threshold": target,
                    "better": better, "unit": unit, "met": met})  # fmt: skip
    return out


def _engine_targets(results: dict[str, Any]) -> list[tuple[str, float | None, float, str, str]]:
    """Issue 8's goals, on each database; the sizes in the labels are the run's own."""
    wq = "workqueue"

    def future(metric: str) -> str:
        entry = results["metrics"].get(metric, {}).get(wq)
        return f"{entry['future']:,}" if entry else "N"

    rows = []
    for prefix, vendor in (("", "PostgreSQL"), ("sqlite_", "SQLite")):
        rows += [
            (f"issue 8, {vendor}: drain beside {future(prefix + 'future_backlog_ratio')} "
             f"future jobs ≥ 0.8x alone", _median(results, prefix + "future_backlog_ratio", wq),
             0.8, "higher", "x"),
            (f"issue 8, {vendor}: idle poll beside {future(prefix + 'idle_poll_p50')} future "
             f"jobs < 2 ms (median)", _median(results, prefix + "idle_poll_p50", wq), 2.0,
             "lower", " ms"),
        ]  # fmt: skip
    rows += [
        ("issue 8, SQLite: claim from two queues ≤ 1.3x one queue (no goal in the issue; "
         "the backlog target's yardstick)", _median(results, "sqlite_queue_claim_ratio", wq),
         1.3, "lower", "x"),
        ("issue 8, PostgreSQL: cancellation p95 ≤ 100 ms", _median(results, "cancel_p95", wq),
         100.0, "lower", " ms"),
    ]  # fmt: skip
    for prefix, vendor in (("", "PostgreSQL"), ("sqlite_", "SQLite")):
        rows += [
            (f"issue 15, {vendor}: process pool drains CPU-bound jobs ≥ 1.8x the thread pool",
             _median(results, prefix + "pools_cpu_ratio", wq), 1.8, "higher", "x"),
            (f"issue 15, {vendor}: process pool drains no-ops ≥ 0.5x the thread pool",
             _median(results, prefix + "pools_noop_ratio", wq), 0.5, "higher", "x"),
        ]  # fmt: skip
    for case, what in (
        ("concurrency", "concurrency="),
        ("concurrency_per_key", "per-key concurrency="),
        ("rate", "rate="),
        ("fair", "fair_key="),
    ):
        rows.append(
            (
                f"issue 16, PostgreSQL: claim under {what} ≤ 1.2x a plain claim",
                _median(results, f"flow_claim_{case}_ratio", wq),
                1.2,
                "lower",
                "x",
            )
        )
    return rows


def targets_table(rows: list[dict[str, Any]]) -> str:
    lines = []
    unmeasured = 0
    for row in rows:
        if row["measured"] is None:
            unmeasured += 1
            continue
        measured = f"{row['measured']:,.2f}{row['unit']}"
        verdict = "MET" if row["met"] else "missed"
        lines.append(f"  [{verdict:>6}] {row['target']}: measured {measured}")
    if unmeasured:
        lines.append(f"  ({unmeasured} other targets not measured in this run)")
    return "\n".join(lines)


def markdown(results: dict[str, Any], main: str, peers: list[str], labels: dict[str, str]) -> str:
    """The same table and the targets in Markdown, for docs/explanation/performance.md."""
    lines = rows(results, main, peers, labels)
    out = ["| " + " | ".join(lines[0]) + " |", "|" + "---|" * len(lines[0])]
    out += ["| " + " | ".join(line) + " |" for line in lines[1:]]
    out += ["", "| target | measured | verdict |", "|---|---|---|"]
    for row in results.get("targets", []):
        if row["measured"] is not None:
            verdict = "met" if row["met"] else "missed"
            out.append(f"| {row['target']} | {row['measured']:,.2f}{row['unit']} | {verdict} |")
    return "\n".join(out) + "\n"
