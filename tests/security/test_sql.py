"""User SQL (issue 17, item 2): the `sql` processor runs one query over the batch, nothing else.

Refused at the API with a 400 naming `params.query` and the construct; refused again on the
worker before `spark.sql` for a job stored before the check existed.
"""

import getpass
import json

import pytest

from inventory.models import Job
from tests.support.api_support import make_inventory, token_client
from workers.spark.errors import BatchError
from workers.spark.processors import (
    ProcessorContext,
    ProcessorError,
    get_processor,
    query_to_run,
)
from workers.spark.run import run_batch
from workers.spark.sql_guard import SqlRefused, check_query
from workers.spark.sql_plan import check_plan

ALLOWED = [
    "SELECT * FROM batch",
    "SELECT a, count(*) AS n FROM batch GROUP BY a",
    "WITH t AS (SELECT * FROM batch) SELECT * FROM t UNION ALL SELECT * FROM batch",
    "SELECT transform(xs, x -> x + 1), substr(a, 1, 2), nvl(a, b), date_format(t, 'y') "
    "FROM batch LATERAL VIEW explode(xs) e AS v",
    "SELECT * FROM batch WHERE id >= :lower AND id < :upper",
    "SELECT *, row_number() OVER (PARTITION BY a ORDER BY b) AS n FROM batch",
    "SELECT /*+ BROADCAST(b) */ * FROM batch b WHERE EXISTS (SELECT 1 FROM batch c)",
    "SELECT from_json(CAST(value AS STRING), 'id BIGINT') AS r FROM batch",
]

# (query, a word the refusal must name)
REFUSED = [
    ("SELECT java_method('java.lang.System', 'getenv', 'SRC_DSN') FROM batch", "java_method"),
    ("SELECT reflect('java.lang.System', 'getenv', 'X')", "reflect"),
    ("SELECT * FROM text.`/etc/hostname`", "text.`/etc/hostname`"),
    ("SELECT * FROM parquet.`/data`", "parquet"),
    ("SELECT * FROM read_files('/etc')", "read_files"),
    ("SELECT * FROM range(10)", "range"),
    ("SELECT * FROM IDENTIFIER('auth_user')", "IDENTIFIER"),
    ("SELECT * FROM default.batch", "default.batch"),
    ("SELECT (SELECT max(a) FROM orders) FROM batch", "orders"),
    ("SELECT my_udf(a) FROM batch", "my_udf"),
    ("SELECT xpath(a, '/x') FROM batch", "xpath"),
    ("SELECT current_user()", "current_user"),
    ("SELECT '${env:DATABASE_URL}' FROM batch", "${"),
    ("SET spark.sql.ansi.enabled=false", "SET"),
    ("ADD JAR /tmp/evil.jar", "ADD JAR"),
    ("CREATE TEMPORARY VIEW v AS SELECT 1", "CREATE"),
    ("INSERT INTO t SELECT * FROM batch", "INSERT"),
    ("DROP TABLE batch", "DROP"),
    ("SELECT 1 FROM batch; SELECT 2 FROM batch", "2 statements"),
    # script transformation: Spark runs the command on the executors (no Hive needed)
    ("SELECT TRANSFORM(id) USING 'sh -c \"id\"' AS (out) FROM batch", "TRANSFORM"),
    ("FROM batch SELECT TRANSFORM(*) USING 'cat'", "TRANSFORM"),
    ("SELECT TRANSFORM(id) ROW FORMAT DELIMITED USING 'cat' FROM batch", "TRANSFORM"),
    ("WITH t AS (SELECT TRANSFORM(id) USING 'cat' FROM batch) SELECT * FROM t", "TRANSFORM"),
    ("SELECT FROM WHERE (", "Spark SQL"),
    # sqlglot's own function builders raise on a wrong argument count (an IndexError here)
    ("SELECT map(id) FROM batch", "Spark SQL"),
]


@pytest.mark.parametrize("query", ALLOWED)
def test_a_query_over_the_batch_with_pure_functions_is_allowed(query):
    check_query(query, inputs=("batch",))


@pytest.mark.parametrize(("query", "construct"), REFUSED)
def test_anything_else_is_refused_naming_the_construct(query, construct):
    with pytest.raises(SqlRefused) as caught:
        check_query(query, inputs=("batch",))
    assert construct.lower() in str(caught.value).lower()


@pytest.mark.django_db
@pytest.mark.parametrize(("query", "construct"), [*REFUSED[:6], REFUSED[-1]])
def test_the_api_refuses_it_with_a_400_naming_params_query(role_users, query, construct):
    connector, _ = make_inventory()
    api = token_client(role_users["admin"])
    payload = {
        "name": "evil",
        "connector": connector.name,
        "batch_weight": 100,
        "processor": "sql",
        "params": {"query": query},
    }
    response = api.post("/api/v1/jobs/", payload, format="json")
    assert response.status_code == 400, response.content
    assert construct.lower() in str(response.json()["params.query"]).lower()
    assert not Job.objects.filter(name="evil").exists()


@pytest.mark.django_db
def test_editing_a_job_to_a_refused_query_is_a_400(role_users):
    _, job = make_inventory(processor="sql", params={"query": "SELECT * FROM batch"})
    api = token_client(role_users["operator"])
    response = api.patch(
        f"/api/v1/jobs/{job.name}/",
        {"params": {"query": "SELECT * FROM text.`/etc/hostname`"}},
        format="json",
    )
    assert response.status_code in (400, 403), response.content
    if response.status_code == 400:
        assert "params.query" in response.json()
    job.refresh_from_db()
    assert job.params == {"query": "SELECT * FROM batch"}


def test_the_worker_refuses_a_stored_query_before_spark_runs_it(spark, tmp_path, monkeypatch):
    monkeypatch.setenv("TIDEMARK_SQL_CANARY", "canary-value-17")
    df = spark.createDataFrame([(1,)], "id INT")
    context = ProcessorContext(
        job="j",
        batch_id=1,
        lower=0,
        upper=1,
        params={"query": "SELECT java_method('java.lang.System', 'getenv', 'TIDEMARK_SQL_CANARY')"},
    )
    with pytest.raises(ProcessorError, match="java_method"):
        get_processor("sql")(df, context)
    secret = tmp_path / "secret.txt"
    secret.write_text("do-not-read")
    context = ProcessorContext(
        job="j", batch_id=1, lower=0, upper=1, params={"query": f"SELECT * FROM text.`{secret}`"}
    )
    with pytest.raises(ProcessorError, match="not allowed"):
        get_processor("sql")(df, context)
    # a script transformation would run a shell command on the executors
    marker = tmp_path / "ran"
    context = ProcessorContext(
        job="j",
        batch_id=1,
        lower=0,
        upper=1,
        params={"query": f"SELECT TRANSFORM(id) USING 'touch {marker}' AS (o) FROM batch"},
    )
    with pytest.raises(ProcessorError, match="TRANSFORM"):
        get_processor("sql")(df, context).collect()
    assert not marker.exists()
    # the allowed query still runs
    allowed = ProcessorContext(
        job="j", batch_id=1, lower=0, upper=1, params={"query": "SELECT id + 1 AS n FROM batch"}
    )
    assert [row.n for row in get_processor("sql")(df, allowed).collect()] == [2]


# ---- issue 42: the seam between the guard's reading and Spark's ------------------------------

CANARY = "canary-value-42"

# texts the guard before issue 42 read as `SELECT id, v FROM batch` while Spark ran the rest
# (sqlglot nests `/*+` inside a comment, Spark does not; Spark continues `--` over `\` + newline)
SEAM_ATTACKS = {
    "secret": "SELECT id, v FROM batch /* /*+ */ UNION ALL SELECT java_method('java.lang.System', "
    "'getenv', 'TIDEMARK_SQL_CANARY') AS id, 'x' AS v -- */",
    "secret-backslash": "SELECT id, v FROM batch -- \\\n/*\nUNION ALL SELECT java_method("
    "'java.lang.System', 'getenv', 'TIDEMARK_SQL_CANARY') AS id, 'x' AS v -- */",
    "file": "SELECT id, v FROM batch /* /*+ */ UNION ALL SELECT 0 AS id, value AS v "
    "FROM text.`{secret}` -- */",
    "command": "SELECT id, v FROM batch /* /*+ */ UNION ALL SELECT TRANSFORM(id, v) "
    "USING 'touch {marker}' AS (id, v) FROM batch -- */",
    "directory": "/* /*+ */ INSERT OVERWRITE DIRECTORY '{directory}' USING parquet -- */\n"
    "SELECT id, v FROM batch",
    "directory-backslash": "-- \\\n/*\nINSERT OVERWRITE DIRECTORY '{directory}' USING parquet "
    "-- */\nSELECT id, v FROM batch",
}

# (query, words the refusal must hold): each was accepted before issue 42
SEAM_REFUSED = [
    (SEAM_ATTACKS["secret"], "comment opened inside"),
    (SEAM_ATTACKS["secret-backslash"], "backslash"),
    # an inner WITH name is not trusted outside its scope, nor inside its own definition
    ("WITH t AS (SELECT * FROM t) SELECT * FROM t", "relation t"),
    (
        "SELECT * FROM (WITH s AS (SELECT * FROM batch) SELECT * FROM s) x JOIN s ON x.id = s.id",
        "relation s",
    ),
    ("WITH a AS (SELECT * FROM b), b AS (SELECT * FROM batch) SELECT * FROM a", "relation b"),
    # sizes: bounded before the text is parsed
    ("SELECT " + ", ".join(f"v AS c{i}" for i in range(7000)) + " FROM batch", "65,536 bytes"),
    ("SELECT " + "(" * 40 + "1" + ")" * 40 + " FROM batch", "limit is 32"),
]


def _one_row(spark):
    return spark.createDataFrame([(1, "a")], "id INT, v STRING")


def _context(query):
    return ProcessorContext(job="j", batch_id=1, lower=0, upper=1, params={"query": query})


@pytest.mark.parametrize(("query", "words"), SEAM_REFUSED, ids=lambda v: str(v)[:40])
def test_texts_the_parsers_read_differently_and_oversized_ones_are_refused(query, words):
    with pytest.raises(SqlRefused) as caught:
        check_query(query, inputs=("batch",))
    assert words in str(caught.value)


@pytest.mark.django_db
@pytest.mark.parametrize(("query", "words"), SEAM_REFUSED, ids=lambda v: str(v)[:40])
def test_the_api_refuses_the_seam_attacks_with_a_400_naming_params_query(role_users, query, words):
    connector, _ = make_inventory()
    api = token_client(role_users["admin"])
    payload = {
        "name": "evil",
        "connector": connector.name,
        "batch_weight": 100,
        "processor": "sql",
        "params": {"query": query},
    }
    response = api.post("/api/v1/jobs/", payload, format="json")
    assert response.status_code == 400, response.content
    assert words in str(response.json()["params.query"])
    assert not Job.objects.filter(name="evil").exists()


@pytest.mark.parametrize("name", SEAM_ATTACKS)
def test_a_stored_seam_attack_runs_nothing_on_the_worker(spark, tmp_path, monkeypatch, name):
    """A job stored around the API: the worker refuses the text or runs only the checked query;
    the secret, the file, the command and the directory stay untouched."""
    monkeypatch.setenv("TIDEMARK_SQL_CANARY", CANARY)
    secret = tmp_path / "secret.txt"
    secret.write_text("do-not-read")
    marker = tmp_path / "ran"
    directory = tmp_path / "kept"
    directory.mkdir()
    (directory / "keep.txt").write_text("still here")
    query = SEAM_ATTACKS[name].format(secret=secret, marker=marker, directory=directory)
    try:
        rows = get_processor("sql")(_one_row(spark), _context(query)).collect()
    except ProcessorError as exc:
        assert exc.param == "query"
        rows = []
    assert all(tuple(row) == (1, "a") for row in rows), rows
    assert not marker.exists()
    assert (directory / "keep.txt").read_text() == "still here"


def test_spark_runs_the_checked_query_not_the_users_text(spark):
    """A comment the guard drops never reaches Spark: what runs is the checked tree written out."""
    query = "SELECT id, /* a comment */ upper(v) AS v FROM batch -- trailing\n WHERE id = :batch_id"
    text = query_to_run({"query": query})
    assert "comment" not in text and "trailing" not in text
    assert [tuple(r) for r in get_processor("sql")(_one_row(spark), _context(query)).collect()] == [
        (1, "A")
    ]


@pytest.mark.parametrize(
    "text",
    [
        "SELECT java_method('java.lang.System', 'getenv', 'X') FROM batch",
        "SELECT * FROM text.`/etc/passwd`",
        "SELECT TRANSFORM(id) USING 'id' FROM batch",
        "INSERT OVERWRITE DIRECTORY '/tmp/x' SELECT * FROM batch",
        "SELECT * FROM range(3)",
        "SELECT * FROM IDENTIFIER('batch')",
        "WITH t AS (SELECT * FROM t) SELECT * FROM t",
        "SELECT /*+ NO_SUCH_HINT(batch) */ * FROM batch",
        "SELECT system.builtin.upper(v) FROM batch",
        "SET spark.sql.ansi.enabled=false",
        "SELECT sum(id) OVER w FROM batch WINDOW w AS (PARTITION BY reflect('a', 'b'))",
    ],
)
def test_the_workers_plan_check_refuses_what_spark_would_read_beyond_a_query(spark, text):
    with pytest.raises(SqlRefused):
        check_plan(spark, text)


def test_a_stored_refused_query_fails_its_batch_before_anything_is_read(spark, tmp_path):
    spec = {
        "job": "j",
        "batch_id": 1,
        "kind": "incremental",
        "lower": 0,
        "upper": 1,
        "items": [str(tmp_path / "never-read.json")],
        "format": "json",
        "read_options": {},
        "schema": None,
        "lineage": False,
        "processor": "sql",
        "params": {"query": "SELECT " + "(" * 40 + "1" + ")" * 40 + " FROM batch"},
        "sink": {"kind": "files", "path": str(tmp_path / "out")},
    }
    with pytest.raises(BatchError) as caught:
        run_batch(spark, spec)
    assert caught.value.stage == "config"
    assert "param 'query' nests brackets 40 deep; the limit is 32" in caught.value.message
    assert not (tmp_path / "out").exists()


# ---- the analyzer's niladic functions: a bare name no input column answers to ---------------------

# Spark's analyzer resolves each of these to CurrentUser (the worker's OS user name) when the
# batch's input has no column of that name; the backquoted and `user` forms pass both the guard
# and the parser's plan, so only the analyzed plan shows them
OS_USER_QUERIES = [
    "SELECT current_user AS u FROM batch",
    "SELECT `current_user` AS u FROM batch",
    "SELECT user AS u FROM batch",
    "SELECT `user` AS u FROM batch",
    "SELECT session_user AS u FROM batch",
    "SELECT `session_user` AS u FROM batch",
    "SELECT id FROM batch WHERE id IN (SELECT id FROM batch WHERE `user` <> 'nobody')",
    "WITH t AS (SELECT id, user AS u FROM batch) SELECT u FROM t",
]


def _sql_batch_spec(tmp_path, query: str, rows: list[dict]) -> dict:
    items = tmp_path / "in.json"
    items.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return {
        "job": "j",
        "batch_id": 1,
        "kind": "incremental",
        "lower": 0,
        "upper": 1,
        "items": [str(items)],
        "format": "json",
        "read_options": {},
        "schema": None,
        "lineage": False,
        "processor": "sql",
        "params": {"query": query},
        "sink": {"kind": "files", "path": str(tmp_path / "out"), "format": "json"},
    }


@pytest.mark.parametrize("query", OS_USER_QUERIES)
def test_a_batch_reading_the_workers_os_user_is_refused(spark, tmp_path, query):
    spec = _sql_batch_spec(tmp_path, query, [{"id": 1, "v": "a"}])
    with pytest.raises(BatchError) as caught:
        run_batch(spark, spec)
    message = caught.value.message
    assert "param 'query'" in message
    assert "current_user" in message or "session_user" in message
    # nothing ran: the error does not carry the name the function would have given
    assert f"'{getpass.getuser()}'" not in message
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "query",
    [
        "SELECT id, user FROM batch WHERE id = 1",
        "SELECT id, `user` AS who FROM batch WHERE user <> 'bob'",
    ],
)
def test_a_batch_whose_input_has_a_user_column_reads_that_column(spark, tmp_path, query):
    spec = _sql_batch_spec(tmp_path, query, [{"id": 1, "user": "alice"}, {"id": 2, "user": "bob"}])
    run_batch(spark, spec)
    written = [
        json.loads(line)
        for path in sorted((tmp_path / "out").rglob("*.json"))
        for line in path.read_text().splitlines()
    ]
    assert [row["id"] for row in written] == [1]
    assert list(written[0].values())[1] == "alice"


def test_the_analyzed_check_names_the_function_spark_resolved(spark):
    df = spark.createDataFrame([(1, "a")], "id INT, v STRING")
    with pytest.raises(ProcessorError) as caught:
        get_processor("sql")(df, _context("SELECT `current_user` AS u FROM batch"))
    assert caught.value.param == "query"
    assert "uses current_user" in str(caught.value)
    assert "CurrentUser" in str(caught.value)
    # the clock and the session's time zone are not the worker's environment: still allowed
    ran = get_processor("sql")(
        df, _context("SELECT id, current_date AS d, current_timezone() AS tz FROM batch")
    )
    assert [(row.id, row.tz) for row in ran.collect()] == [(1, "UTC")]


def test_an_order_by_spark_resolves_to_current_user_is_refused_and_a_qualified_one_runs(spark):
    """Spark itself resolves `ORDER BY user` over a column the query does not select to
    current_user(), even when the input has that column; qualified, it is the column."""
    df = spark.createDataFrame([(1, "b"), (2, "a")], "id INT, user STRING")
    with pytest.raises(ProcessorError, match="qualify it"):
        get_processor("sql")(df, _context("SELECT id FROM batch ORDER BY `user`"))
    ran = get_processor("sql")(df, _context("SELECT id FROM batch ORDER BY batch.user"))
    assert [row.id for row in ran.collect()] == [2, 1]
