"""One-line migrations for the SQL files in inventory/sql/migrations/: the baseline
(0001_baseline.sql, applied by migration 0001_baseline after its tables) and each numbered change
after it, applied by the migration of the same number:

    operations = [RunSQLFile("0029_<name>.sql")]

The file is read when the migration module is imported, so `sqlmigrate` shows its text. A file is
never edited once a migration applies it; a change to a function is the next numbered file (the
`CREATE OR REPLACE` of what changed), after editing its current definition in
inventory/sql/schema/ (inventory/sql/README.md).
"""

from django.db import migrations

from inventory.sql import SQL_DIR


def sql_file(name: str) -> str:
    return (SQL_DIR / "migrations" / name).read_text()


class RunSQLFile(migrations.RunSQL):
    """RunSQL with the text of inventory/sql/migrations/<name>; `reverse` names another file there
    (None: the change cannot be reversed; "noop": reversing leaves the database as it is)."""

    def __init__(self, name: str, reverse: str | None = None, **kwargs):
        if reverse == "noop":
            reverse_sql = migrations.RunSQL.noop
        elif reverse is None:
            reverse_sql = None
        else:
            reverse_sql = sql_file(reverse)
        super().__init__(sql_file(name), reverse_sql, **kwargs)
        self.file_name = name

    def describe(self) -> str:
        return f"Raw SQL from inventory/sql/migrations/{self.file_name}"
