"""Migration operations that change the jobs table's indexes without blocking its writes.

On PostgreSQL a plain ``CREATE INDEX`` holds a lock that stops every insert and update of the
table while it reads the whole table, and a busy jobs table may hold millions of rows: workers
and enqueues would stall for the length of the build. These operations build and drop indexes
``CONCURRENTLY`` there (the migration that uses them sets ``atomic = False``: PostgreSQL refuses
``CONCURRENTLY`` inside a transaction) and fall back to Django's plain operations, each in a
transaction of its own, on any other database.

A migration that is not atomic can stop halfway, and is then simply run again: on PostgreSQL
each operation looks at what a failed run left (a concurrent build that failed leaves an
*invalid* index behind, which is dropped and built again; a valid one is kept), elsewhere each
operation rolled back whole.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models, router, transaction
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.operations.base import Operation
from django.db.migrations.operations.models import IndexOperation
from django.db.migrations.state import ProjectState


def _postgresql(schema_editor: BaseDatabaseSchemaEditor) -> bool:
    return schema_editor.connection.vendor == "postgresql"


def _drop_index(schema_editor: BaseDatabaseSchemaEditor, name: str) -> None:
    concurrently = " CONCURRENTLY" if _postgresql(schema_editor) else ""
    schema_editor.execute(f"DROP INDEX{concurrently} IF EXISTS {schema_editor.quote_name(name)}")


def _index_state(schema_editor: BaseDatabaseSchemaEditor, name: str) -> bool | None:
    """PostgreSQL: whether the index ``name`` is valid (False: a failed concurrent build left
    it), None if there is none. Writing SQL out (``sqlmigrate``): None, the whole sequence."""
    if schema_editor.collect_sql:
        return None
    with schema_editor.connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indisvalid FROM pg_class AS c JOIN pg_index AS i ON i.indexrelid = c.oid "
            "WHERE c.relname = %s AND pg_table_is_visible(c.oid)",
            [name],
        )
        row = cursor.fetchone()
    return None if row is None else bool(row[0])


def _build(schema_editor: BaseDatabaseSchemaEditor, name: str, create: str) -> None:
    """Run ``create`` (a CREATE ... INDEX CONCURRENTLY of ``name``) unless a valid ``name``
    is there already; an invalid one (a failed run's) is dropped first."""
    state = _index_state(schema_editor, name)
    if state is True:
        return
    if state is False:
        _drop_index(schema_editor, name)
    schema_editor.execute(create)


def _swap(
    schema_editor: BaseDatabaseSchemaEditor,
    model: type[models.Model],
    old: str,
    new: models.Index | models.UniqueConstraint,
    prefix: str,
) -> None:
    """PostgreSQL: put ``new`` in the place of the index ``old`` without blocking writes, and
    without a moment with neither: ``new`` is built CONCURRENTLY under a temporary name, then
    ``old`` is dropped and ``new`` renamed. ``prefix`` is how ``new`` is created
    (``"CREATE INDEX "`` or ``"CREATE UNIQUE INDEX "``). A run that stopped after the build (or
    after the drop) keeps the valid new index and goes on from there."""
    quote = schema_editor.quote_name
    temporary = f"{new.name[:50]}_new"
    building = new.clone()  # every option kept (include, condition, ...), renamed
    building.name = temporary
    sql = str(building.create_sql(model, schema_editor))
    if not sql.startswith(prefix):  # e.g. not an index: a plain constraint cannot be concurrent
        raise ValueError(f"{new.name} is not built by {prefix.strip()}: {sql}")
    _build(schema_editor, temporary, f"{prefix}CONCURRENTLY {sql[len(prefix) :]}")
    _drop_index(schema_editor, old)
    schema_editor.execute(f"ALTER INDEX {quote(temporary)} RENAME TO {quote(new.name)}")


class AddIndexConcurrently(migrations.AddIndex):
    """``AddIndex``, built without blocking writes on PostgreSQL."""

    def database_forwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        model = to_state.apps.get_model(app_label, self.model_name)
        if not self.allow_migrate_model(schema_editor.connection.alias, model):
            return
        if not _postgresql(schema_editor):
            with transaction.atomic(using=schema_editor.connection.alias):
                _drop_index(schema_editor, self.index.name)
                schema_editor.add_index(model, self.index)
            return
        create = str(self.index.create_sql(model, schema_editor, concurrently=True))
        _build(schema_editor, self.index.name, create)

    def database_backwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        model = from_state.apps.get_model(app_label, self.model_name)
        if self.allow_migrate_model(schema_editor.connection.alias, model):
            _drop_index(schema_editor, self.index.name)

    def describe(self) -> str:
        return f"{super().describe()} (concurrently on PostgreSQL)"


class DropIndexConcurrently(Operation):
    """Drop the index ``name`` of ``model_name``'s ``table`` (one the state does not describe,
    such as a foreign key's own index), without blocking writes on PostgreSQL; backwards,
    build it again on ``columns``. A database operation only: pair it with the state's change
    in ``SeparateDatabaseAndState``."""

    reversible = True
    reduces_to_sql = True

    def __init__(self, model_name: str, name: str, table: str, columns: list[str]) -> None:
        self.model_name, self.index_name = model_name, name
        self.table, self.columns = table, columns

    def state_forwards(self, app_label: str, state: ProjectState) -> None:
        pass

    def database_forwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        if self._allowed(app_label, schema_editor):
            _drop_index(schema_editor, self.index_name)

    def database_backwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        if not self._allowed(app_label, schema_editor):
            return
        quote = schema_editor.quote_name
        columns = ", ".join(quote(column) for column in self.columns)
        target = f"{quote(self.index_name)} ON {quote(self.table)} ({columns})"
        if _postgresql(schema_editor):
            _build(schema_editor, self.index_name, f"CREATE INDEX CONCURRENTLY {target}")
            return
        with transaction.atomic(using=schema_editor.connection.alias):
            _drop_index(schema_editor, self.index_name)
            schema_editor.execute(f"CREATE INDEX {target}")

    def _allowed(self, app_label: str, schema_editor: BaseDatabaseSchemaEditor) -> bool:
        alias = schema_editor.connection.alias
        return bool(router.allow_migrate(alias, app_label, model_name=self.model_name))

    def describe(self) -> str:
        return f"Drop index {self.index_name} (concurrently on PostgreSQL)"


class _Replacing(IndexOperation):
    """What the two replacing operations share: ``old`` gives way to ``new`` (forwards) and
    back (backwards), on PostgreSQL by ``_swap``, elsewhere by Django's remove then add in one
    transaction (nothing, where both are made by the same SQL: SQLite's ``wq_job_status_finished``).

    Not an ``AddIndex`` or ``AddConstraint``: the migration optimizer folds those into a
    ``CreateModel`` of the model (``squashmigrations``), which would keep both and lose the old
    one's removal."""

    old: Any
    new: Any
    prefix: str  # how ``new`` is created, for ``_swap``

    def __init__(self, model_name: str, new: Any, old: Any) -> None:
        self.model_name, self.new, self.old = model_name, new, old

    @property
    def migration_name_fragment(self) -> str:
        return f"{self.model_name_lower}_{self.new.name.lower()}"

    def database_forwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        self._replace(app_label, schema_editor, to_state, self.old, self.new)

    def database_backwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        self._replace(app_label, schema_editor, to_state, self.new, self.old)

    def _replace(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        state: ProjectState,
        old: Any,
        new: Any,
    ) -> None:
        model = state.apps.get_model(app_label, self.model_name)
        if not self.allow_migrate_model(schema_editor.connection.alias, model):
            return
        if not _postgresql(schema_editor):
            made = [str(each.create_sql(model, schema_editor)) for each in (old, new)]
            if made[0] == made[1]:
                return  # the same index: nothing to rebuild under the write lock
            with transaction.atomic(using=schema_editor.connection.alias):
                _drop_index(schema_editor, old.name)  # SQLite: a unique index too
                self._add(schema_editor, model, new)
            return
        _swap(schema_editor, model, old.name, new, self.prefix)

    def _add(self, schema_editor: BaseDatabaseSchemaEditor, model: Any, new: Any) -> None:
        raise NotImplementedError


class ReplaceUniqueIndexConcurrently(_Replacing):
    """Replace the conditional ``UniqueConstraint`` ``old`` with ``constraint`` of the same name.

    On PostgreSQL a conditional unique constraint is a unique index. The new one is built under
    a temporary name first, then the old one is dropped and the new one renamed: uniqueness is
    enforced at every moment (the new condition must refuse every row the old one refused), and
    neither build nor drop blocks writes. A run that stopped after the build (or after the drop)
    keeps the valid new index and goes on from there. Elsewhere: Django's remove then add, in
    one transaction."""

    option_name = "constraints"
    prefix = "CREATE UNIQUE INDEX "

    def __init__(
        self, model_name: str, constraint: models.UniqueConstraint, old: models.UniqueConstraint
    ) -> None:
        super().__init__(model_name, constraint, old)
        self.constraint = constraint

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        kwargs = {"model_name": self.model_name, "constraint": self.new, "old": self.old}
        return self.__class__.__qualname__, [], kwargs

    def state_forwards(self, app_label: str, state: ProjectState) -> None:
        state.remove_constraint(app_label, self.model_name_lower, self.old.name)
        state.add_constraint(app_label, self.model_name_lower, self.new)

    def _add(self, schema_editor: BaseDatabaseSchemaEditor, model: Any, new: Any) -> None:
        schema_editor.add_constraint(model, new)

    def describe(self) -> str:
        return f"Replace unique index {self.new.name} (concurrently on PostgreSQL)"


class ReplaceIndexConcurrently(_Replacing):
    """Replace the index ``old`` with ``index`` (its columns or its condition changed; the names
    may be the same): on PostgreSQL without blocking writes and without a moment with neither
    (``_swap``); elsewhere Django's remove then add, in one transaction."""

    option_name = "indexes"
    prefix = "CREATE INDEX "

    def __init__(self, model_name: str, index: models.Index, old: models.Index) -> None:
        super().__init__(model_name, index, old)
        self.index = index

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        kwargs = {"model_name": self.model_name, "index": self.new, "old": self.old}
        return self.__class__.__qualname__, [], kwargs

    def state_forwards(self, app_label: str, state: ProjectState) -> None:
        state.remove_index(app_label, self.model_name_lower, self.old.name)
        state.add_index(app_label, self.model_name_lower, self.new)

    def _add(self, schema_editor: BaseDatabaseSchemaEditor, model: Any, new: Any) -> None:
        schema_editor.add_index(model, new)

    def describe(self) -> str:
        return f"Replace index {self.new.name} (concurrently on PostgreSQL)"
