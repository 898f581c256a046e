"""The process's own identity is read from /proc once per process, not before every claim."""

from __future__ import annotations

import os
import sys

import pytest

from django_workqueue import process_identity

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


def test_own_token_is_read_once_per_process(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[int] = []
    token_of = process_identity.token_of

    def counted(pid: int) -> str | None:
        reads.append(pid)
        return token_of(pid)

    monkeypatch.setattr(process_identity, "_own", None)
    monkeypatch.setattr(process_identity, "token_of", counted)
    first = process_identity.own_token()
    assert first is not None and first == token_of(os.getpid())
    assert process_identity.own_token() == first
    assert reads == [os.getpid()]  # the second call reads nothing


def test_a_forked_child_reads_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(process_identity, "_own", (os.getpid() + 1, "another process's"))
    assert process_identity.own_token() == process_identity.token_of(os.getpid())
