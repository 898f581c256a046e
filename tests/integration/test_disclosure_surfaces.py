"""Every surface by every hidden field: a user without the permission a field needs
(``disclosure.HIDDEN``) never reads its value, wherever rows are shown — the admin's pages and
lists, the API, the websockets' messages, the ``workqueue`` command.

Both tables live in ``tests/support/disclosure.py``: a feature that adds a hidden field adds a
row to ``HIDDEN_VALUES``, one that adds a surface adds it to ``SURFACES``.
"""

from __future__ import annotations

import re

import pytest

from django_workqueue.disclosure import HIDDEN
from tests.support.disclosure import HIDDEN_VALUES, SURFACES, build_scene, write_world
from tests.support.users import OPERATOR, user_with

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("fast_passwords")]

SECRET = "Zq9sXw"
# Each hidden value reads "<secret>-<part>" (one job holds the secret, the other it reversed).
_SHOWN = re.compile(rf"(?:{SECRET}|{SECRET[::-1]})-([a-z]+(?:-[a-z]+)?)")


def read(codenames: tuple[str, ...], *surfaces: str) -> set[str]:
    """The parts of the hidden values that ``surfaces`` show a user holding ``codenames``."""
    scene = build_scene()
    write_world(scene, SECRET)
    user = user_with(*codenames, username="reader", is_staff=True)
    return {part for name in surfaces for part in _SHOWN.findall(SURFACES[name](user, scene))}


def test_the_walk_covers_every_row_of_the_catalogue():
    walked = {row.name for row in HIDDEN_VALUES}

    assert {f"{row.model.__name__}.{row.field}" for row in HIDDEN} <= walked


@pytest.mark.parametrize("surface", list(SURFACES))
def test_a_viewer_never_reads_a_hidden_value(surface):
    assert read(("view_job",), surface) == set()


@pytest.mark.parametrize("surface", list(SURFACES))
def test_the_traceback_permission_shows_tracebacks_and_nothing_of_the_payload(surface):
    assert read(("view_job", "view_job_traceback"), surface) <= {"traceback"}


def test_the_payload_permissions_show_every_hidden_value_somewhere():
    # The walk's control: each secret is written where a cleared user reads it.
    shown = read(OPERATOR, *SURFACES)

    assert shown == {part for row in HIDDEN_VALUES for part in row.parts}
