"""The audit trail: one ``AuditRecord`` per operator change, whatever surface it came through.

``record()`` is a plain INSERT on the jobs database: called inside the transaction that makes
the change, the record commits or rolls back with it. Changes that run in several transactions
(a filter applied batch by batch) are recorded once, after the last batch, with the total.

>>> with transaction.atomic():
...     result = operations.cancel_job(job_id)
...     audit.record(request.user, "cancel", {"ids": [job_id]}, result.count, "admin")
"""

from __future__ import annotations

import getpass
import json
from typing import Any

from .conf import workqueue_settings as conf
from .models import AuditRecord, AuditSource

MAX_IDS = 100
"""A target's id list keeps its first ``MAX_IDS`` ids (and ``ids_total``)."""
MAX_TARGET_CHARS = 4096
"""A target larger than this (as JSON) is stored cut, under ``truncated``."""


def record(
    actor: Any,
    action: str,
    target: Any,
    changed: int,
    source: str,
    *,
    alias: str | None = None,
    via: str | None = None,
) -> AuditRecord:
    """Write one audit row. ``actor`` is a user (its pk and username are kept), a string
    (``"cli:alice"``) or None (``"system"``); ``target`` the ids or the filter acted on.
    ``via`` names who acted for the user, kept with its name: ``"alice (cli:root)"`` is the
    OS user root running ``manage.py workqueue --user alice``."""
    user_pk, name = _who(actor)
    if via is not None:
        suffix = f" ({via})"[:150]
        name = name[: 150 - len(suffix)] + suffix
    if source not in AuditSource.values:
        raise ValueError(f"unknown audit source {source!r}; one of: {', '.join(AuditSource)}")
    return AuditRecord.objects.using(alias or conf.DATABASE).create(
        user_pk=user_pk, actor=name, action=action, target=bounded(target), changed=changed,
        source=source,
    )  # fmt: skip


def cli_actor() -> str:
    """``cli:<os user>``: who ran ``manage.py workqueue``."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers), no USER variable
        user = "unknown"
    return f"cli:{user}"


def bounded(target: Any) -> Any:
    """``target`` made small enough to store: long id lists cut to ``MAX_IDS``, anything still
    larger than ``MAX_TARGET_CHARS`` as JSON kept as its cut text."""
    if isinstance(target, dict) and isinstance(target.get("ids"), list | tuple):
        ids = list(target["ids"])
        if len(ids) > MAX_IDS:
            target = {**target, "ids": ids[:MAX_IDS], "ids_total": len(ids)}
    text = json.dumps(target, default=str)
    if len(text) > MAX_TARGET_CHARS:
        return {"truncated": text[:MAX_TARGET_CHARS]}
    return json.loads(text)


def _who(actor: Any) -> tuple[str, str]:
    if actor is None:
        return "", "system"
    if isinstance(actor, str):
        return "", actor[:150]
    if not getattr(actor, "is_authenticated", False):
        return "", "anonymous"
    return str(actor.pk), actor.get_username()[:150]
