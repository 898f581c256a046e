"""``workqueue explain ID``: ``operations.explain`` as text for a terminal (``--json``: its
``as_dict()``). Each reason is one paragraph, wrapped to the terminal's width."""

from __future__ import annotations

import shutil
import textwrap
from typing import Any

from ..operations import Explanation


def lines(answer: Explanation, width: int | None = None) -> list[str]:
    """The answer as text: a heading, then each reason as a wrapped bullet."""
    width = width or shutil.get_terminal_size((100, 24)).columns
    if answer.finished:
        heading = f"job {answer.job_id} is {answer.status}: it finished"
    elif answer.running:
        heading = f"job {answer.job_id} is running"
    else:
        heading = f"job {answer.job_id} is {answer.status}: why it is not running"
    out = [heading]
    messages = [reason.message for reason in answer.reasons] or [answer.summary]
    for message in messages:
        out += textwrap.wrap(
            message, width=max(40, width), initial_indent="  - ", subsequent_indent="    "
        )
    return out


def write(stream: Any, answer: Explanation) -> None:
    stream.write("\n".join(lines(answer)))
