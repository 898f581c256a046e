"""The demo's tasks: a small shop's background work, with the failures real work runs into.

Each task sleeps a little to stand for real work. The failures are deterministic (they depend on
the arguments and the attempt number), so every run of the demo ends the same way.
"""

from __future__ import annotations

import asyncio
import time

from django_workqueue import Discard, Snooze, task


class UpstreamUnavailable(ConnectionError):
    """The partner API answered 503."""


@task(queue="mail", priority=5, max_attempts=3, backoff=0.3)
def send_receipt(context, order_id, email, flaky=False):
    """Mail a receipt. ``flaky`` receipts hit a dropped SMTP connection on their first attempt."""
    time.sleep(0.05)
    if flaky and context.attempt == 1:
        raise ConnectionResetError("SMTP server reset the connection")
    return {"order_id": order_id, "to": email}


@task(queue="default", max_attempts=3)
def resize_image(context, image_id, sizes):
    """Make thumbnails, reporting progress after each size."""
    for n, width in enumerate(sizes, 1):
        time.sleep(0.12)
        context.set_progress(n, len(sizes), f"{width}px")
    return {"image_id": image_id, "sizes": sizes}


@task(queue="reports", max_attempts=2)
def build_report(context, name, sections=4):
    """Build a report; the demo enqueues it with a delay."""
    for n in range(1, sections + 1):
        time.sleep(0.1)
        context.set_progress(n, sections, f"section {n}")
    return {"report": name, "sections": sections}


@task(queue="reports", max_attempts=1, lease_seconds=3)
def export_archive(context, parts):
    """A long export that stops when cancelled.

    With a 3-second lease the heartbeat runs every second, so a cancel request reaches the
    task within about a second; ``raise_if_cancelled()`` then ends the job ``cancelled``.
    """
    for n in range(1, parts + 1):
        context.raise_if_cancelled()
        time.sleep(0.1)
        context.set_progress(n, parts, f"part {n}")
    return {"parts": parts}


def _upstream_backoff(attempt: int) -> float:
    # Seconds before the next try: 0.25, 0.5, 1.0 … (kept small so the demo stays short).
    return 0.25 * 2 ** (attempt - 1)


@task(queue="default", max_attempts=4, backoff=_upstream_backoff)
def call_upstream(context, request_id, failures):
    """Call a partner API that answers 503 to the first ``failures`` attempts."""
    time.sleep(0.05)
    if context.attempt <= failures:
        raise UpstreamUnavailable(f"partner API answered 503 ({request_id})")
    return {"request_id": request_id, "attempts": context.attempt}


@task(queue="default", max_attempts=5)
def sync_contact(context, contact_id):
    """Retrying cannot help once the contact is gone: Discard ends the job in the DLQ."""
    raise Discard(f"contact {contact_id} was deleted upstream")


@task(queue="low", max_attempts=3, backoff=0.3)
def import_legacy_feed(context, url):
    """A poison job: it fails on every attempt and ends failed once its attempts are spent."""
    time.sleep(0.05)
    raise ValueError(f"malformed record at line 17 of {url}")


@task(queue="default", max_attempts=1)
def wait_for_upload(context, upload_id, delay=0.4):
    """Snooze until the upload has landed; snoozing does not spend an attempt."""
    if context.attempt == 1:
        raise Snooze(delay=delay)
    return {"upload_id": upload_id, "ready_on_attempt": context.attempt}


@task(queue="default")
async def fetch_exchange_rates(currency):
    """An async task: it runs on the worker's event loop."""
    await asyncio.sleep(0.2)
    return {"currency": currency, "EUR": 1.0}


@task(queue="low", priority=-10)
def purge_temp_files(context, older_than_days):
    time.sleep(0.05)
    return {"older_than_days": older_than_days, "removed": 0}


# --- a workflow: launching a product (testproject/demo/launch.py builds and reports it) ----------


@task(queue="default")
def render_photo(sku, photo):
    """One member of the fan-out: render one product photo."""
    time.sleep(0.05)
    return f"{sku}-{photo}.jpg"


@task(queue="default")
def build_gallery(photos, sku):
    """The fan-in: a chord's callback receives the list of the renders' results, in order."""
    return {"sku": sku, "photos": len(photos)}


@task(queue="default", max_attempts=1)
def auto_reject(sku):
    """The approval step. A manager answers from outside any worker: ``complete_job`` approves
    (its result goes to the next step), ``fail_job`` rejects. If nobody answers before its
    delay runs out, it runs, and rejects the launch."""
    raise Discard(f"{sku}: nobody approved the launch in time")


@task(queue="default")
def publish_product(inputs, sku):
    """Runs once the gallery is built and the launch approved: ``inputs`` is [gallery, approval]."""
    gallery, approval = inputs
    time.sleep(0.05)
    return f"{sku}: {gallery['photos']} photos, approved by {approval['approved_by']}"


@task(queue="mail")
def announce(context, published, subscribers):
    """A fan-out decided at run time: one mail per subscriber, added to the workflow with
    ``context.add`` (written only if this attempt succeeds). The next step waits for them."""
    for email in subscribers:
        context.add(notify_subscriber.s(email))
    return len(subscribers)


@task(queue="mail")
def notify_subscriber(email):
    time.sleep(0.05)
    return email


@task(queue="default")
def close_launch(context, announced, sku):
    """The last step: it waited for ``announce`` and for every mail it added."""
    mailed = [d.result for d in context.dependencies if d.task_name.endswith("notify_subscriber")]
    return {"sku": sku, "announced": announced, "mailed": len(mailed)}


@task(queue="reports", max_attempts=1, lease_seconds=10)
def crunch_numbers(context, seconds=10.0, steps=20):
    """A long job for the live progress page (/demo/progress/): a step every
    ``seconds / steps``, each reported with a message and details, stopping when cancelled."""
    for n in range(1, steps + 1):
        context.raise_if_cancelled()
        time.sleep(seconds / steps)
        context.set_progress(n, steps, f"crunched block {n} of {steps}", details={"block": n})
    return {"blocks": steps}
