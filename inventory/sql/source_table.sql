-- Statements Tidemark sends to a `table` connector's own PostgreSQL database (never its own).
-- `{table}` and `{column}` are filled with checked, quoted identifiers (psycopg2.sql.Identifier);
-- every value is a bound parameter.

-- name: table_column_type
-- the column's type, or no row when the table or the column does not exist
SELECT format_type(a.atttypid, a.atttypmod), t.typname
FROM pg_attribute AS a JOIN pg_type AS t ON t.oid = a.atttypid
WHERE a.attrelid = to_regclass(%(relation)s) AND a.attname = %(column)s
  AND a.attnum > 0 AND NOT a.attisdropped;

-- name: relation_schema
-- the schema of the relation the name resolves to (an unqualified name through search_path, where
-- pg_catalog comes first), or no row when there is none; a system schema is never a source
SELECT n.nspname, c.relname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
WHERE c.oid = to_regclass(%(relation)s);

-- name: table_identity
-- which server and database this is: the same pair as Tidemark's own means Tidemark's database
SELECT (SELECT system_identifier FROM pg_control_system())::text, current_database();

-- name: server_identity
-- the running server (its start time, to the microsecond) and database, readable by any user
-- (pg_control_system() is not readable everywhere); the same pair means the same database
SELECT extract(epoch FROM pg_postmaster_start_time())::text, current_database();

-- name: table_bounds
-- the smallest and largest value of an integer column, read at planning time (the source's
-- clock), and how many rows no slice holds: those whose column is NULL (counted up to 1,001)
SELECT min({column}), max({column}),
       (SELECT count(*) FROM (SELECT 1 FROM {table} WHERE {column} IS NULL LIMIT 1001) AS nulls)
FROM {table};

-- name: table_time_bounds
-- the smallest and largest value of a timestamp column within [first, last], what Tidemark can
-- hold (a value with a successor in years 1 to 9999: never 'infinity'), each by one probe of an
-- index on the column, and how many rows lie outside it, 'infinity' and NULL included (counted
-- up to 1,001: they are in no slice, and discovery says so). The session's TimeZone is UTC.
SELECT (SELECT min({column}) FROM {table} WHERE {column} >= %(first)s AND {column} <= %(last)s),
       (SELECT max({column}) FROM {table} WHERE {column} >= %(first)s AND {column} <= %(last)s),
       (SELECT count(*) FROM (
            SELECT 1 FROM {table}
            WHERE {column} < %(first)s OR {column} > %(last)s OR {column} IS NULL LIMIT 1001
        ) AS outside);

-- name: table_next_slice
-- the next slice from lower (inclusive) up to horizon (inclusive): at most `rows` rows in
-- column order; `boundary` is the first value past the slice (none: the rest fits), `rows_in`
-- the rows before it. An index on the column makes this cost O(rows), whatever the table's size.
WITH head AS (
    SELECT {column} AS v FROM {table}
    WHERE {column} >= %(lower)s AND {column} <= %(horizon)s
    ORDER BY {column} LIMIT %(rows)s + 1
), boundary AS (
    SELECT v FROM head ORDER BY v OFFSET %(rows)s LIMIT 1
)
SELECT (SELECT v FROM boundary),
       count(*) FILTER (WHERE (SELECT v FROM boundary) IS NULL OR v < (SELECT v FROM boundary))
FROM head;

-- name: table_next_value
-- the first value above `value` up to horizon: ends a slice of rows that all share one value
SELECT min({column}) FROM {table} WHERE {column} > %(value)s AND {column} <= %(horizon)s;

-- name: table_count_range
-- rows with lower <= column < upper
SELECT count(*) FROM {table} WHERE {column} >= %(lower)s AND {column} < %(upper)s;

-- name: table_synced_offsets
-- history-then-live: the largest topic offset each partition's rows were synced from, over the
-- rows the connector registered (column < upper)
SELECT {partition}, max({offset}) FROM {table}
WHERE {column} < %(upper)s AND {partition} IS NOT NULL AND {offset} IS NOT NULL
GROUP BY {partition};
