"""Migration operations that change the jobs table's indexes without blocking its writes.

On PostgreSQL a plain ``CREATE INDEX`` holds a lock that stops every insert and update of the
table while it reads the whole table, and a busy jobs table may hold millions of rows: workers
and enqueues would stall for the length of the build. These operations build and drop indexes
``CONCURRENTLY`` there (the migration that uses them sets ``atomic = False``: PostgreSQL refuses
``CONCURRENTLY`` inside a transaction) and fall back to Django's plain operations on any other
database. A concurrent build that failed halfway leaves an invalid index behind; each operation
drops what an earlier failed run of it may have left before it builds, so the migration can
simply be run again.
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, models, router
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.operations.base import Operation
from django.db.migrations.state import ProjectState


def _postgresql(schema_editor: BaseDatabaseSchemaEditor) -> bool:
    return schema_editor.connection.vendor == "postgresql"


def _drop_index(schema_editor: BaseDatabaseSchemaEditor, name: str) -> None:
    concurrently = " CONCURRENTLY" if _postgresql(schema_editor) else ""
    schema_editor.execute(f"DROP INDEX{concurrently} IF EXISTS {schema_editor.quote_name(name)}")


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
            schema_editor.add_index(model, self.index)
            return
        _drop_index(schema_editor, self.index.name)  # an invalid one a failed run left
        schema_editor.add_index(model, self.index, concurrently=True)  # type: ignore[call-arg]

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


class DropIndexConcurrently(Operation):
    """Drop the index ``name`` of ``table`` (one the state does not describe, such as a foreign
    key's own index), without blocking writes on PostgreSQL; backwards, build it again on
    ``columns``. A database operation only: pair it with the state's change in
    ``SeparateDatabaseAndState``."""

    reversible = True
    reduces_to_sql = False

    def __init__(self, name: str, table: str, columns: list[str]) -> None:
        self.index_name, self.table, self.columns = name, table, columns

    def state_forwards(self, app_label: str, state: ProjectState) -> None:
        pass

    def database_forwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        if router.allow_migrate(schema_editor.connection.alias, app_label):
            _drop_index(schema_editor, self.index_name)

    def database_backwards(
        self,
        app_label: str,
        schema_editor: BaseDatabaseSchemaEditor,
        from_state: ProjectState,
        to_state: ProjectState,
    ) -> None:
        if not router.allow_migrate(schema_editor.connection.alias, app_label):
            return
        quote = schema_editor.quote_name
        concurrently = " CONCURRENTLY" if _postgresql(schema_editor) else ""
        columns = ", ".join(quote(column) for column in self.columns)
        _drop_index(schema_editor, self.index_name)  # an invalid one a failed run left
        schema_editor.execute(
            f"CREATE INDEX{concurrently} {quote(self.index_name)} "
            f"ON {quote(self.table)} ({columns})"
        )

    def describe(self) -> str:
        return f"Drop index {self.index_name} (concurrently on PostgreSQL)"


class ReplaceUniqueIndexConcurrently(migrations.AddConstraint):
    """Replace the conditional ``UniqueConstraint`` of the same name with ``constraint``.

    On PostgreSQL a conditional unique constraint is a unique index. The new one is built under
    a temporary name first, then the old one is dropped and the new one renamed: uniqueness is
    enforced at every moment (the new condition must admit no row the old one refused), and
    neither build nor drop blocks writes. Elsewhere: Django's remove then add."""

    def __init__(
        self, model_name: str, constraint: models.UniqueConstraint, old: models.UniqueConstraint
    ) -> None:
        super().__init__(model_name, constraint)
        self.new = constraint
        self.old = old

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        kwargs = {"model_name": self.model_name, "constraint": self.constraint, "old": self.old}
        return self.__class__.__qualname__, [], kwargs

    def state_forwards(self, app_label: str, state: ProjectState) -> None:
        state.remove_constraint(app_label, self.model_name_lower, self.old.name)
        state.add_constraint(app_label, self.model_name_lower, self.constraint)

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
        old: models.UniqueConstraint,
        new: models.UniqueConstraint,
    ) -> None:
        model = state.apps.get_model(app_label, self.model_name)
        if not self.allow_migrate_model(schema_editor.connection.alias, model):
            return
        if not _postgresql(schema_editor):
            schema_editor.remove_constraint(model, old)
            schema_editor.add_constraint(model, new)
            return
        quote = schema_editor.quote_name
        temporary = f"{new.name[:50]}_new"
        building = models.UniqueConstraint(
            fields=new.fields, condition=new.condition, name=temporary
        )
        sql = str(building.create_sql(model, schema_editor))
        prefix = "CREATE UNIQUE INDEX "
        if not sql.startswith(prefix):  # not an index: a plain constraint cannot be concurrent
            raise ValueError(f"{new.name} is not built as a unique index: {sql}")
        _drop_index(schema_editor, temporary)  # an invalid one a failed run left
        schema_editor.execute(f"CREATE UNIQUE INDEX CONCURRENTLY {sql[len(prefix) :]}")
        _drop_index(schema_editor, old.name)
        schema_editor.execute(f"ALTER INDEX {quote(temporary)} RENAME TO {quote(new.name)}")

    def describe(self) -> str:
        return f"Replace unique index {self.constraint.name} (concurrently on PostgreSQL)"
