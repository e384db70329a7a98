"""Where a job's items come from, as SQL: Tidemark's own asset table, or an external meta table.

An external meta table is named in the connector's config:

    {"meta_table": {"table": "public.events_meta", "uid_column": "uid", "item_column": "item",
                    "weight_column": "weight", "filters": [{"column": "kind", "op": "eq", "value": "a"}]}}

Table and column names are validated identifiers, quoted; filter values are always bound parameters,
and operators come from a fixed list: no user text reaches SQL otherwise.
"""

import re
from dataclasses import dataclass, field, replace

from django.db import DatabaseError, ProgrammingError, connection, transaction
from psycopg2.errors import InsufficientPrivilege

from inventory.services.errors import InvalidInput
from inventory.sources.config import check_known_keys
from inventory.sources.identity import source_table_check
from inventory.sql import gateway

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}$")

# the role local meta tables are read as (created by inventory/sql/migrations/0001_baseline.sql;
# docs/security.md)
READER_ROLE = "tidemark_reader"

# operator name -> SQL template over one quoted column; "%s" is the bound value
FILTER_OPERATORS = {
    "eq": "{col} = %s",
    "ne": "{col} <> %s",
    "lt": "{col} < %s",
    "le": "{col} <= %s",
    "gt": "{col} > %s",
    "ge": "{col} >= %s",
    "in": "{col} = ANY(%s)",
    "not_in": "NOT ({col} = ANY(%s))",
    "is_null": "{col} IS NULL",
    "not_null": "{col} IS NOT NULL",
}
_NO_VALUE_OPERATORS = {"is_null", "not_null"}


def quote_identifier(name: str, *, field_name: str) -> str:
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
        raise InvalidInput(
            field_name, f"{name!r} is not a valid SQL identifier (letters, digits, underscore)"
        )
    return f'"{name}"'


def quote_table(name: str, *, field_name: str) -> str:
    parts = name.split(".") if isinstance(name, str) else [name]
    if len(parts) > 2:
        raise InvalidInput(field_name, f"{name!r}: expected 'table' or 'schema.table'")
    return ".".join(quote_identifier(part, field_name=field_name) for part in parts)


@dataclass(frozen=True)
class ItemSource:
    """A FROM/WHERE fragment yielding (uid, weight, item) rows, plus its bound parameters."""

    relation: str
    uid: str
    weight: str
    item: str
    where: list[str] = field(default_factory=list)
    params: list = field(default_factory=list)
    # SQL that is false for a row planning must stop in front of (the visibility horizon)
    settled: str = "true"
    # the config field named when reading the source fails (a missing table, a bad value)
    config_field: str = "config.meta_table"
    # the role a read of the rows takes (a user's table: READER_ROLE), None: Tidemark's own
    reads_as: str | None = None
    # the connector whose assets these are (Tidemark's asset table): planning searches their
    # prefix sums instead of reading the rows (tidemark_plan_assets); None for any other source
    prefix_sums_of: int | None = None

    def select(
        self, *, lower: int, upper: int | None, limit: int | None, with_item: bool = True
    ) -> tuple[str, list]:
        """(uid, weight[, item]) rows with lower <= uid < upper (None: unbounded), in uid order."""
        where = [*self.where, f"{self.uid} >= %s"]
        params = [*self.params, lower]
        if upper is not None:
            where.append(f"{self.uid} < %s")
            params.append(upper)
        item = f", {self.item} AS item" if with_item else ""
        sql = (
            f"SELECT {self.uid} AS uid, {self.weight} AS weight{item} "
            f"FROM {self.relation} WHERE {' AND '.join(where)} ORDER BY {self.uid}"
        )
        if limit is not None:
            sql += " LIMIT %s"
            params.append(limit)
        return sql, params

    def select_bounds(self, spans: list[tuple[int, int, int]]) -> tuple[str, list]:
        """(key, first uid, last uid) of each (key, lower, upper) half-open span, in one
        statement (an index range scan per span); first and last are NULL for an empty span."""
        where = [*self.where, f"{self.uid} >= tm_span.lo", f"{self.uid} < tm_span.hi"]
        keys, lows, highs = (
            (list(column) for column in zip(*spans, strict=True)) if spans else ([], [], [])
        )
        sql = (
            "SELECT tm_span.k, tm_bounds.first, tm_bounds.last "
            "FROM unnest(%s::bigint[], %s::bigint[], %s::bigint[]) AS tm_span(k, lo, hi) "
            f"CROSS JOIN LATERAL (SELECT min({self.uid}) AS first, max({self.uid}) AS last "
            f"FROM {self.relation} WHERE {' AND '.join(where)}) AS tm_bounds"
        )
        return sql, [keys, lows, highs, *self.params]

    def planning_query(self) -> str:
        """(uid, weight, settled) rows in uid order from uid $1 on, as the text the planning
        functions execute (they add the end bound and stop at the first unsettled row); filter
        values are bound by the driver (mogrify)."""
        where = [*self.where, f"{self.uid} >= $1"]
        sql = (
            f"SELECT {self.uid} AS uid, {self.weight} AS weight, {self.settled} AS settled "
            f"FROM {self.relation} "
            f"WHERE {' AND '.join(where)} ORDER BY {self.uid}"
        )
        return connection.ops.compose_sql(sql, self.params)


def assets_source(connector_id: int) -> ItemSource:
    return ItemSource(
        relation="inventory_asset",
        uid="id",
        weight="weight",
        item="location",
        where=["connector_id = %s"],
        params=[connector_id],
        prefix_sums_of=connector_id,
    )


def meta_table_source(spec: dict) -> ItemSource:
    """Validate a `meta_table` config and build its source. Raises InvalidInput naming the field."""
    if not isinstance(spec, dict):
        raise InvalidInput("config.meta_table", "must be an object")
    table = spec.get("table")
    if not table:
        raise InvalidInput("config.meta_table.table", "is required")
    relation = quote_table(table, field_name="config.meta_table.table")
    uid = quote_identifier(spec.get("uid_column", "uid"), field_name="config.meta_table.uid_column")
    item = quote_identifier(
        spec.get("item_column", "item"), field_name="config.meta_table.item_column"
    )
    weight_column = spec.get("weight_column", "weight")
    weight = (
        "1"
        if weight_column is None
        else quote_identifier(weight_column, field_name="config.meta_table.weight_column")
    )
    where, params = [], []
    filters = spec.get("filters", [])
    if not isinstance(filters, list):
        raise InvalidInput("config.meta_table.filters", "must be a list of {column, op, value}")
    for index, flt in enumerate(filters):
        clause, values = _filter_clause(flt, f"config.meta_table.filters[{index}]")
        where.append(clause)
        params.extend(values)
    settled = _visibility_horizon(spec, relation)
    return ItemSource(relation, uid, weight, item, where, params, settled, reads_as=READER_ROLE)


def fetch_items(source: ItemSource, sql: str, params: list) -> list[tuple]:
    """Run a read of `source`'s rows on Tidemark's connection. A user's table is read as
    READER_ROLE (SET LOCAL ROLE in a transaction of its own, reset before it ends), a role with no
    privilege on Tidemark's tables, so the database refuses what `source_table_check` missed."""
    try:
        return gateway.item_rows(sql=sql, params=params, reads_as=source.reads_as)
    except ProgrammingError as exc:
        if isinstance(exc.__cause__, InsufficientPrivilege):
            raise InvalidInput(
                source.config_field,
                f"Tidemark reads local meta tables as the role {source.reads_as}, which may not "
                f"read this one ({str(exc).strip().splitlines()[0]}); an administrator grants it: "
                f"GRANT SELECT ON {source.relation} TO {source.reads_as} (docs/security.md)",
            ) from None
        raise


VISIBILITY_MODES = ("writers", "settle", "none")

# what a `meta_table` object may hold, in Tidemark's database or another (with `dsn_env`), and each
# of its filters: a key nothing reads (`filter` for `filters`, `weight_colum`) is refused when the
# connector is saved (check_meta_table_keys), never a filter or a column silently left out
META_TABLE_KEYS = (
    "table",
    "uid_column",
    "item_column",
    "weight_column",
    "filters",
    "visibility",
    "time_column",
    "settle_seconds",
)
FILTER_KEYS = ("column", "op", "value")


def check_meta_table_keys(spec) -> None:
    """InvalidInput naming `config.meta_table.<key>` (or a filter's) for a key nothing reads.
    Checked when a connector is saved, not when one saved before is read."""
    if not isinstance(spec, dict):
        return  # meta_table_source says what it must be
    check_known_keys(spec, META_TABLE_KEYS, kind="meta_table", field="config.meta_table")
    filters = spec.get("filters")
    for index, flt in enumerate(filters if isinstance(filters, list) else []):
        if isinstance(flt, dict):
            check_known_keys(
                flt, FILTER_KEYS, kind="filter", field=f"config.meta_table.filters[{index}]"
            )


def _visibility_horizon(spec: dict, relation: str) -> str:
    """SQL that is true for a meta-table row that no id still in flight can precede (invariant 5).

    A user's table gives no promise that ids become visible in id order: with a serial id, a
    writer can take id 1, another take id 2 and commit first. Planning stops in front of the first
    row that is not settled, so a range never closes over an id that may still commit:

    - "writers" (default): a row is settled once every transaction that was writing to the table
      when it committed has ended: its inserting transaction (xmin) is older than the oldest
      transaction still holding a write lock on the table (pg_locks). Needs a table (not a view)
      whose ids are assigned by the INSERT itself (a serial/identity column or a DEFAULT).
    - "settle": rows whose `time_column` is at least `settle_seconds` old; the user promises that
      no writing transaction runs longer than that.
    - "none": the user promises ids are commit-ordered (e.g. a trigger assigns them under a lock).
    """
    mode = spec.get("visibility", "writers")
    if mode not in VISIBILITY_MODES:
        raise InvalidInput(
            "config.meta_table.visibility",
            f"unknown mode {mode!r}; use one of {', '.join(VISIBILITY_MODES)}",
        )
    if mode == "none":
        return "true"
    if mode == "settle":
        column = quote_identifier(
            spec.get("time_column"), field_name="config.meta_table.time_column"
        )
        seconds = spec.get("settle_seconds")
        if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 0:
            raise InvalidInput(
                "config.meta_table.settle_seconds", "must be a non-negative integer of seconds"
            )
        return f"({column} <= statement_timestamp() - make_interval(secs => {seconds}))"
    # the relation text is validated, double-quoted identifiers: safe inside a literal
    return (
        f"(age({relation}.xmin) > coalesce((SELECT max(age(x.transactionid)) "
        "FROM pg_locks AS r JOIN pg_locks AS x ON x.virtualtransaction = r.virtualtransaction "
        "AND x.locktype = 'transactionid' AND x.mode = 'ExclusiveLock' "
        f"WHERE r.locktype = 'relation' AND r.relation = to_regclass('{relation}') "
        "AND r.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
        "AND r.mode = 'RowExclusiveLock' AND r.pid <> pg_backend_pid()), -2147483648))"
    )


def _filter_clause(flt: dict, field_name: str) -> tuple[str, list]:
    if not isinstance(flt, dict):
        raise InvalidInput(field_name, "must be an object with column, op and value")
    op = flt.get("op")
    if op not in FILTER_OPERATORS:
        raise InvalidInput(
            f"{field_name}.op",
            f"unknown operator {op!r}; use one of {', '.join(sorted(FILTER_OPERATORS))}",
        )
    column = quote_identifier(flt.get("column"), field_name=f"{field_name}.column")
    clause = FILTER_OPERATORS[op].format(col=column)
    if op in _NO_VALUE_OPERATORS:
        return clause, []
    if "value" not in flt:
        raise InvalidInput(f"{field_name}.value", f"operator {op!r} needs a value")
    value = flt["value"]
    if op in ("in", "not_in") and not isinstance(value, list):
        raise InvalidInput(f"{field_name}.value", f"operator {op!r} needs a list")
    return clause, [value]


def unique_uids(source: ItemSource) -> ItemSource:
    """A local meta table whose planners stop at a uid that appears more than once.

    A batch is a uid range: two rows with one uid would be one item counted twice (a batch over
    its item cap, a preview of an empty range "with 1 item"). Each row planning reaches is checked
    with one probe of the uid (its index), and a duplicate stops every planner (incremental,
    acquire, backfill, preview) with a message naming it (tidemark_refuse), never a batch. The
    check counts the whole table, filters aside: uids name rows of the table, not of a filter.
    A table with a valid unique index on the uid column alone cannot hold a duplicate: the probe
    is skipped then (one catalog lookup per read, so dropping that index brings the probe back).
    """
    relation, uid = source.relation, source.uid
    # relation and uid are validated, double-quoted identifiers: safe inside a literal
    message = (
        f"'uid ' || {relation}.{uid} || ' appears more than once in meta table "
        f"{relation.replace(chr(39), '')}: a uid must name one row (add a unique index on "
        f"{uid.replace(chr(39), '')}); planning stops here until it does'"
    )
    duplicated = (
        f"(SELECT count(*) FROM {relation} AS tm_same WHERE tm_same.{uid} = {relation}.{uid}) > 1"
    )
    unique = (
        "(SELECT EXISTS (SELECT 1 FROM pg_index AS tm_i JOIN pg_attribute AS tm_a "
        "ON tm_a.attrelid = tm_i.indrelid AND tm_a.attnum = tm_i.indkey[0] "
        f"WHERE tm_i.indrelid = to_regclass('{relation}') AND tm_i.indisunique "
        "AND tm_i.indisvalid AND tm_i.indnkeyatts = 1 AND tm_i.indpred IS NULL "
        f"AND tm_i.indexprs IS NULL AND tm_a.attname = '{uid.strip(chr(34))}'))"
    )
    settled = (
        f"(CASE WHEN {unique} THEN {source.settled} "
        f"WHEN {duplicated} THEN tidemark_refuse({message}) ELSE {source.settled} END)"
    )
    return replace(source, settled=settled)


def check_meta_table(spec: dict) -> None:
    """Fail with a clear error when the meta table is one of Tidemark's own (or reads one), or
    when it or one of its columns does not exist."""
    check_meta_table_keys(spec)
    source = meta_table_source(spec)
    source_table_check(source.relation, field="config.meta_table.table")
    sql, params = source.select(lower=0, upper=None, limit=0)
    try:
        with transaction.atomic():
            fetch_items(source, sql, params)
            duplicates = fetch_items(
                source,
                f"SELECT {source.uid} FROM {source.relation} GROUP BY {source.uid} "
                "HAVING count(*) > 1 ORDER BY 1 LIMIT 1",
                [],
            )
            duplicate = duplicates[0] if duplicates else None
    except DatabaseError as exc:  # the database names the missing relation or column
        message = str(exc).strip().splitlines()[0]
        raise InvalidInput("config.meta_table", message) from None
    if duplicate is not None:
        raise InvalidInput(
            "config.meta_table.uid_column",
            f"uid {duplicate[0]} appears more than once in {spec.get('table')}: a uid must name "
            "one row (add a unique index on the column)",
        )
