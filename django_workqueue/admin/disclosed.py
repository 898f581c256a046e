"""The admin side of ``disclosure``: what a change list may be filtered, searched and ordered on,
and which fields a page shows, for the requesting user.

The change list turns any ``?field__lookup=value`` into a filter; on a field the user may not
see that is an oracle (``?unique_key__startswith=@args:{"email": "a`` answers yes or no). Only
the lookups of ``disclosure.QUERYABLE`` pass, on fields the user's ``Clearance`` sees; a
refused lookup is Django's ``DisallowedModelAdminLookup`` (400).
"""

from __future__ import annotations

from typing import Any

from django.contrib.admin import SimpleListFilter
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import FieldDoesNotExist, PermissionDenied
from django.http import HttpRequest

from ..disclosure import Clearance

_SEARCH_PREFIXES = "=^@"


class Disclosed:
    """Mixed into a ``ModelAdmin``. A field hidden from the user is dropped from its pages and
    lists, or replaced by ``<field>_shown`` (a display of what the user may see) where the
    admin has one. When the primary key itself is hidden (a flow limit's key), the list links
    to no page, and a page whose key the user could not read is refused whether or not it
    exists."""

    uncleared_ordering: tuple[str, ...] = ()
    """The list's order for users who may not see a field of the model's own ordering."""

    def clearance(self, request: HttpRequest) -> Clearance:
        if not hasattr(request, "_wq_clearance"):
            request._wq_clearance = Clearance.of(request.user)  # type: ignore[attr-defined]
        return request._wq_clearance  # type: ignore[attr-defined]

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        if request is None:  # no user to clear: only what everyone may see
            clearance = Clearance(payload=False, tracebacks=False)
            list_filter = self.list_filter  # type: ignore[attr-defined]
        else:
            clearance = self.clearance(request)
            list_filter = self.get_list_filter(request)  # type: ignore[attr-defined]
        if lookup in _own_parameters(list_filter) or not _names_a_field(self.model, lookup):  # type: ignore[attr-defined]
            # The admin's own filter classes decide what their parameter matches; a name that
            # is no field filters nothing (Django answers with the list's error page).
            return True
        return clearance.lookup_allowed(self.model, lookup)  # type: ignore[attr-defined]

    def _pk_hidden(self, request: HttpRequest) -> bool:
        return not self.clearance(request).may_see(self.model, self.model._meta.pk.name)  # type: ignore[attr-defined]

    def get_object(self, request: HttpRequest, object_id: str, from_field: Any = None) -> Any:
        pk = self.model._meta.pk.name  # type: ignore[attr-defined]
        if from_field not in (None, pk) or not self.clearance(request).searchable(
            self.model,  # type: ignore[attr-defined]
            pk,
            object_id,
        ):
            raise PermissionDenied("this page would show what the user may not see")
        return super().get_object(request, object_id, from_field)  # type: ignore[misc]

    def get_list_display(self, request: HttpRequest) -> list[Any]:
        columns = super().get_list_display(request)  # type: ignore[misc]
        clearance = self.clearance(request)
        shown = (self._shown_field(clearance, column) for column in columns)
        return [column for column in shown if column]

    def get_list_display_links(self, request: HttpRequest, list_display: Any) -> Any:
        if self._pk_hidden(request):
            return None
        return super().get_list_display_links(request, list_display)  # type: ignore[misc]

    def get_ordering(self, request: HttpRequest) -> Any:
        ordering = super().get_ordering(request) or self.model._meta.ordering  # type: ignore[misc,attr-defined]
        clearance = self.clearance(request)
        kept = [
            field for field in ordering
            if clearance.may_see(self.model, str(field).lstrip("-").split("__")[0])  # type: ignore[attr-defined]
        ]  # fmt: skip
        return kept if len(kept) == len(ordering) else list(self.uncleared_ordering)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        if self._pk_hidden(request):
            return UnorderedByKey
        return super().get_changelist(request, **kwargs)  # type: ignore[misc]

    def get_search_fields(self, request: HttpRequest) -> list[str]:
        fields = super().get_search_fields(request)  # type: ignore[misc]
        clearance = self.clearance(request)
        return [
            name for name in fields
            if clearance.may_see(self.model, name.lstrip(_SEARCH_PREFIXES))  # type: ignore[attr-defined]
        ]  # fmt: skip

    def get_sortable_by(self, request: HttpRequest) -> Any:
        columns = super().get_sortable_by(request)  # type: ignore[misc]
        clearance = self.clearance(request)
        return [name for name in columns if clearance.may_see(self.model, self._ordering_of(name))]  # type: ignore[attr-defined]

    def _ordering_of(self, column: str) -> str:
        display = getattr(self, column, None)
        ordering = getattr(display, "admin_order_field", column)
        return str(ordering).lstrip("-").split("__")[0]

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        fieldsets = super().get_fieldsets(request, obj)  # type: ignore[misc]
        clearance = self.clearance(request)
        shown = []
        for name, options in fieldsets:
            fields = []
            for field in options["fields"]:
                if isinstance(field, (list, tuple)):
                    parts = (self._shown_field(clearance, part) for part in field)
                    fields.append(tuple(part for part in parts if part))
                else:
                    fields.append(self._shown_field(clearance, field))
            fields = [field for field in fields if field]
            shown.append((name, {**options, "fields": fields}))
        return shown

    def _shown_field(self, clearance: Clearance, field: Any) -> Any:
        if not isinstance(field, str) or clearance.may_see(self.model, field):  # type: ignore[attr-defined]
            return field
        substitute = f"{field}_shown"
        return substitute if hasattr(self, substitute) else None


def _names_a_field(model: Any, lookup: str) -> bool:
    name = lookup.split("__", 1)[0]
    if name == "pk":
        return True
    try:
        model._meta.get_field(name)
    except FieldDoesNotExist:
        return False
    return True


def _own_parameters(list_filter: Any) -> set[str]:
    """The query parameters of the ``SimpleListFilter`` classes among ``list_filter``."""
    return {
        str(item.parameter_name)
        for item in list_filter
        if isinstance(item, type) and issubclass(item, SimpleListFilter)
    }


class UnorderedByKey(ChangeList):
    """A change list that does not break ties by the primary key (Django's deterministic
    ordering would): for users who may not see the key, its order would tell them about it."""

    def _get_deterministic_ordering(self, ordering: list[Any]) -> list[Any]:
        return ordering
