"""The SQL seam (issue 42): what the guard allows against what Spark's own parser runs.

sqlglot (the guard) and Spark lex SQL differently: `/* /*+ */ X -- */` is one comment to sqlglot
and `X` to Spark; Spark continues a `--` comment over a backslash-newline, sqlglot does not. So
the texts below are fed to both: the text the `sql` processor would hand to `spark.sql`
(`query_to_run`) is parsed by the SparkSession's parser, and the test fails whenever the guard
let through a text whose Spark plan holds anything outside the allowed set, judged by
`outside_allowed` below (independent of the guard's and of workers/spark/sql_plan's code).
Hypothesis builds thousands of variants from the corpus's pieces: comments, hints, quotes,
escapes, backslash-newlines, unicode whitespace and nesting around legitimate queries and the
issue's payloads.
"""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from workers.spark.processors import ProcessorError, query_to_run
from workers.spark.sql_guard import SqlRefused
from workers.spark.sql_plan import check_plan

# what a query may never reach, whatever else it holds
DENIED_FUNCTIONS = {
    "java_method",
    "reflect",
    "try_reflect",
    "xpath",
    "xpath_string",
    "from_xml",
    "input_file_name",
    "current_user",
    "user",
    "session_user",
    "current_database",
    "current_catalog",
    "version",
    "read_files",
    "range",
}
DENIED_CLASS_WORDS = (
    "ScriptTransformation",
    "InsertInto",
    "Command",
    "Statement",
    "TableValuedFunction",
    "UnresolvedIdentifier",
    "CreateTable",
    "CreateView",
    "SetCatalog",
    "Cache",
)

LEGIT = [
    "SELECT id, v FROM batch",
    "SELECT id, upper(v) AS v FROM batch WHERE id >= :lower",
    "WITH t AS (SELECT * FROM batch) SELECT id, v FROM t",
    "SELECT /*+ BROADCAST(b) */ b.id, b.v FROM batch b",
    "SELECT id, count(*) AS n FROM batch GROUP BY id ORDER BY id",
    "SELECT id, 'a''b' AS q, \"x\" AS dq, `v` FROM batch",
]
PAYLOADS = [
    "UNION ALL SELECT java_method('java.lang.System', 'getenv', 'SECRET_KEY') AS id, 1 AS v",
    "UNION ALL SELECT reflect('java.lang.System', 'getenv', 'SECRET_KEY') AS id, 1 AS v",
    "UNION ALL SELECT value AS id, 1 AS v FROM text.`/etc/passwd`",
    "UNION ALL SELECT * FROM parquet.`/var/lib`",
    "UNION ALL SELECT TRANSFORM(id, v) USING 'id' AS (id, v) FROM batch",
    "INSERT OVERWRITE DIRECTORY '/tmp/tm-differential' ",
    ", java_method('java.lang.System', 'getenv', 'X') AS leak",
    "UNION ALL SELECT * FROM range(3)",
    "UNION ALL SELECT current_user() AS id, 1 AS v",
    "WITH inner AS (SELECT * FROM secrets) SELECT * FROM inner UNION ALL ",
]
# the pieces whose reading differs between lexers
PIECES = [
    "/*",
    "*/",
    "/*+",
    "/* /*+ */",
    "/*+ BROADCAST(batch) */",
    "--",
    "-- c",
    "\\",
    "\\\n",
    "-- \\\n",
    "\n",
    "\r\n",
    "'",
    "\\'",
    '"',
    "`",
    "(",
    ")",
    ";",
    " ",
    "\t",
    "\u00a0",
    "\u2028",
    "\u3000",
    "\ufeff",
    "\u200b",
    "$",
    "{",
]

OPENERS = [
    "/* /*+ */",
    "/* /* */",
    "-- \\\n/*\n",
    "-- x\\\r\n/*",
    "/*+ */ /*",
    "--",
    "/*",
    "",
    "'",
    "`",
]
CLOSERS = ["-- */", "-- c*/", "*/", "\n", "*/ */", "", "'", "`", "--"]

# attacks of the issue, each read by the old guard as an allowed query while Spark ran the payload
CORPUS = [
    "SELECT id, v FROM batch /* /*+ */ " + PAYLOADS[0] + " -- */",
    "SELECT id, v FROM batch /* /*+ */ " + PAYLOADS[2] + " -- */",
    "SELECT id, v FROM batch /* /*+ */ " + PAYLOADS[4] + " -- */",
    "/* /*+ */ " + PAYLOADS[5] + "-- */\nSELECT id, v FROM batch",
    "SELECT id, v FROM batch -- \\\n/*\n" + PAYLOADS[0] + " -- */",
    "SELECT id, v FROM batch -- \\\n/*\n" + PAYLOADS[2] + " -- */",
    "-- \\\n/*\n" + PAYLOADS[5] + "-- */\nSELECT id, v FROM batch",
    "WITH t AS (SELECT * FROM t) SELECT id, v FROM t",
    "SELECT * FROM (WITH s AS (SELECT * FROM batch) SELECT * FROM s) x JOIN s ON x.id = s.id",
]


def outside_allowed(spark, text: str) -> list[str]:
    """What Spark's parser reads in `text` beyond one query over `batch` (and its own WITH
    names) with functions other than the denied ones; [] when nothing."""
    parser = spark._jsparkSession.sessionState().sqlParser()
    try:
        plan = json.loads(parser.parsePlan(text).toJSON())
    except Exception:
        return []  # Spark cannot parse it: nothing runs
    found = []

    def nest(flat: list, at: int = 0) -> tuple[dict, int]:
        # Spark writes a tree as its nodes in pre-order, each with its number of children
        node, at = dict(flat[at]), at + 1
        node["children"] = []
        for _ in range(node.get("num-children", 0)):
            child, at = nest(flat, at)
            node["children"].append(child)
        return node, at

    def visit(value, visible: frozenset):
        # visible: the WITH names a relation here may read (Spark's scoping: a definition sees
        # the ones before it, the query under WITH sees them all)
        if isinstance(value, list):
            if value and all(isinstance(v, dict) and "class" in v for v in value):
                visit(nest(value)[0], visible)
            else:
                for item in value:
                    visit(item, visible)
            return
        if not isinstance(value, dict):
            return
        short = str(value.get("class", "")).rsplit(".", 1)[-1]
        if any(word in short for word in DENIED_CLASS_WORDS):
            found.append(short)
        if short == "UnresolvedRelation":
            name = str(value.get("multipartIdentifier")).lower()
            if name != "[batch]" and name.strip("[]") not in visible:
                found.append(f"relation {name}")
        if short == "UnresolvedFunction":
            name = str(value.get("nameParts", "")).strip("[]").lower()
            if name in DENIED_FUNCTIONS or ", " in name:
                found.append(f"function {name}")
        if short == "UnresolvedGenerator":
            name = str((value.get("name") or {}).get("funcName", "")).lower()
            if name in DENIED_FUNCTIONS:
                found.append(f"generator {name}")
        if short == "UnresolvedWith":
            seen = set(visible)
            for relation in value.get("cteRelations") or []:
                visit(relation.get("_2"), frozenset(seen))
                seen.add(str(relation.get("_1", "")).lower())
            for child in value["children"]:
                visit(child, frozenset(seen))
            return
        for child in value.get("children", []):
            visit(child, visible)
        for key, item in value.items():
            if key not in ("class", "children"):
                visit(item, visible)

    visit(plan, frozenset())
    return found


def text_spark_runs(query: str) -> str | None:
    """The text the sql processor hands to spark.sql for `query`; None when it is refused."""
    try:
        return query_to_run({"query": query})
    except ProcessorError:
        return None


@pytest.mark.parametrize("query", CORPUS)
def test_the_issues_attacks_never_reach_spark(spark, query):
    assert outside_allowed(spark, query), "the attack itself must reach Spark unchecked"
    text = text_spark_runs(query)
    assert text is None or outside_allowed(spark, text) == [], text


@pytest.mark.parametrize("query", LEGIT)
def test_legitimate_queries_pass_both_checks_unchanged_in_meaning(spark, query):
    text = text_spark_runs(query)
    assert text is not None
    assert outside_allowed(spark, text) == []
    check_plan(spark, text)  # the worker's check agrees


def _variants():
    """A legitimate query and a payload around an opener and a closer of comments (the forms
    whose reading differs), with a few random pieces between them."""
    piece = st.sampled_from(PIECES) | st.text(alphabet="/*-+\\'\"`\n ", max_size=3)
    noise = st.lists(piece, max_size=2).map("".join)
    return st.builds(
        lambda legit, n1, opener, n2, payload, n3, closer, n4, first: (
            f"{legit} {n1}{opener}{n2} {payload} {n3}{closer}{n4}"
            if first
            else f"{n1}{opener}{n2}{payload}{n3}{closer}{n4}\n{legit}"
        ),
        st.sampled_from(LEGIT),
        noise,
        st.sampled_from(OPENERS),
        noise,
        st.sampled_from(PAYLOADS),
        noise,
        st.sampled_from(CLOSERS),
        noise,
        st.booleans(),
    )


@settings(max_examples=2000)
@given(query=_variants())
def test_no_generated_variant_runs_anything_the_guard_did_not_allow(spark, query):
    text = text_spark_runs(query)
    if text is not None:
        assert outside_allowed(spark, text) == [], (query, text)


@settings(max_examples=1000)
@given(query=_variants())
def test_the_workers_plan_check_alone_holds_the_seam(spark, query):
    """The second line on its own: a raw text the plan check passes holds nothing denied."""
    try:
        check_plan(spark, query)
    except SqlRefused:
        return
    assert outside_allowed(spark, query) == [], query


# legitimate queries over `batch` (id INT, v STRING, t TIMESTAMP, xs ARRAY<INT>, m MAP, j STRING):
# what runs (the checked tree written out) must answer as the user's text does
SAME_ANSWER = [
    "SELECT id, v FROM batch ORDER BY id LIMIT 2 OFFSET 1",
    "SELECT a.id, b.v FROM batch a JOIN batch b ON a.id = b.id LEFT JOIN batch c USING (id)",
    "SELECT v, sum(id) AS s FROM batch GROUP BY v HAVING sum(id) > 1",
    "SELECT * FROM VALUES (1, 'a'), (2, 'b') AS t(x, y)",
    "SELECT CASE WHEN id > 1 THEN 'x' ELSE 'y' END AS c, CAST(id AS DECIMAL(10,2)) AS d, "
    "id IN (1, 2) AS i, id BETWEEN 1 AND 2 AS b, v LIKE 'a%' AS l, 'it''s' AS q, \"dq\" AS dq "
    "FROM batch",
    "SELECT v, count(*) AS n FROM batch GROUP BY GROUPING SETS ((v), ())",
    "SELECT id, x FROM batch LATERAL VIEW OUTER explode(xs) e AS x",
    "SELECT sum(id) OVER w AS s FROM batch WINDOW w AS (PARTITION BY v ORDER BY id)",
    "SELECT filter(xs, x -> x > 1) AS f, aggregate(xs, 0, (acc, x) -> acc + x) AS a FROM batch",
    "SELECT * FROM batch WHERE id IN (SELECT id FROM batch WHERE v = 'a') "
    "AND id <= (SELECT max(id) FROM batch)",
    "WITH t AS (SELECT * FROM batch), u AS (SELECT * FROM t WHERE id > 1) SELECT id FROM u",
    "SELECT date_trunc('hour', t) AS h, extract(YEAR FROM t) AS y, date_format(t, 'yyyy') AS f, "
    "substring(v FROM 1 FOR 1) AS s, trim(BOTH 'x' FROM v) AS tr FROM batch",
    "SELECT m['k'] AS k, try_element_at(xs, 1) AS e, get_json_object(j, '$.a') AS g, "
    "regexp_extract(v, '(\\\\w)', 1) AS r, 'a\\tb' AS tab FROM batch",
    "SELECT /*+ REPARTITION(2) */ id FROM batch WHERE id >= :lower AND id < :upper",
    "SELECT lag(id) OVER (ORDER BY id) AS p, rank() OVER (PARTITION BY v ORDER BY id) AS r FROM batch",
]


@pytest.mark.parametrize("query", SAME_ANSWER)
def test_what_runs_answers_as_the_users_text_does(spark, query):
    from workers.spark.processors import ProcessorContext, get_processor

    df = spark.createDataFrame(
        [
            (1, "a", "2026-01-01 10:30:00", [1, 2], {"k": 1}, '{"a": 1}'),
            (2, "b", "2026-01-01 11:00:00", [3], {"k": 2}, '{"a": 2}'),
            (3, "a", "2026-01-02 00:00:00", [], {"k": 3}, "{}"),
        ],
        "id INT, v STRING, t STRING, xs ARRAY<INT>, m MAP<STRING, INT>, j STRING",
    ).selectExpr("id", "v", "CAST(t AS TIMESTAMP) AS t", "xs", "m", "j")
    text = text_spark_runs(query)
    assert text is not None, query
    check_plan(spark, text)
    context = ProcessorContext(job="j", batch_id=1, lower=0, upper=3, params={"query": query})
    ran = get_processor("sql")(df, context)
    df.createOrReplaceTempView("batch")
    try:
        args = {"lower": 0, "upper": 3} if ":lower" in query else None
        expected = spark.sql(query, args=args)
        assert ran.columns == expected.columns
        assert sorted(map(repr, ran.collect())) == sorted(map(repr, expected.collect()))
    finally:
        spark.catalog.dropTempView("batch")


# ---- after the parser: names Spark's analyzer resolves to a function -----------------------------

# a bare name no input column answers to, which Spark's analyzer may resolve to a function; the
# ones marked True are the attack (Spark resolves them to current_user(), the worker's OS user)
NILADIC = {
    "current_user": True,
    "user": True,
    "session_user": True,
    "current_database": False,
    "current_schema": False,
    "current_catalog": False,
    "current_timezone": False,
    "version": False,
    "input_file_name": False,
    "input_file_block_start": False,
    "current_date": False,
}
PLACES = [
    "SELECT {n} AS x FROM batch",
    "SELECT id FROM batch WHERE {n} IS NOT NULL",
    "SELECT id FROM batch WHERE id IN (SELECT id FROM batch WHERE {n} <> 'x')",
    "WITH t AS (SELECT id, {n} AS x FROM batch) SELECT x FROM t",
    "SELECT id FROM batch ORDER BY {n}",
    "SELECT max(id) AS m FROM batch GROUP BY {n}",
]
# the pretty names of what reads the worker, the session or files, as the analyzed plan shows them
ENVIRONMENT = (
    "current_user()",
    "current_database()",
    "current_schema()",
    "current_catalog()",
    "version()",
    "input_file_name()",
    "input_file_block_start()",
    "reflect(",
    "java_method(",
)
# the attack's names in every place, the others in the select list (each bare and backquoted)
NILADIC_CASES = [
    (name, place.format(n=spelled))
    for name, attack in NILADIC.items()
    for place in (PLACES if attack else PLACES[:1])
    for spelled in (name, f"`{name}`")
]


def environment_read(analyzed) -> list[str]:
    """What the analyzed plan reads beyond the batch (judged on Spark's own rendering of it)."""
    rendered = analyzed.toString()
    return [name for name in ENVIRONMENT if name in rendered]


@pytest.mark.parametrize(("name", "query"), NILADIC_CASES)
def test_no_name_resolves_to_the_workers_environment_in_what_runs(spark, name, query):
    from workers.spark.processors import ProcessorContext, get_processor

    df = spark.createDataFrame([(1, "a")], "id INT, v STRING")
    if NILADIC[name]:
        # the attack reaches Spark's analyzer unchecked as Spark reads the text
        df.createOrReplaceTempView("batch")
        try:
            raw = spark.sql(query)._jdf.queryExecution().analyzed()
        finally:
            spark.catalog.dropTempView("batch")
        assert "current_user()" in environment_read(raw), query
    context = ProcessorContext(job="j", batch_id=1, lower=0, upper=1, params={"query": query})
    try:
        ran = get_processor("sql")(df, context)
    except ProcessorError as exc:
        assert exc.param == "query"
        return
    except Exception:  # Spark's analysis refused it (no such column): nothing ran
        assert not NILADIC[name], query
        return
    assert environment_read(ran._jdf.queryExecution().analyzed()) == [], query


@pytest.mark.parametrize(
    "query", [q for n, q in NILADIC_CASES if NILADIC[n] and ("`" in q or n == "user")]
)
def test_an_input_column_of_that_name_is_read_as_the_column(spark, query):
    from workers.spark.processors import ProcessorContext, get_processor

    df = spark.createDataFrame(
        [(1, "x1", "y1", "z1")], "id INT, current_user STRING, user STRING, session_user STRING"
    )
    context = ProcessorContext(job="j", batch_id=1, lower=0, upper=1, params={"query": query})
    try:
        ran = get_processor("sql")(df, context)
    except ProcessorError as exc:
        assert exc.param == "query"
        if text_spark_runs(query) is None:
            return  # the guard reads a bare current_user / session_user as a call: refused at save
        # refused on the worker only where Spark itself resolves the name to the function (an
        # ORDER BY of a column the query does not select)
        df.createOrReplaceTempView("batch")
        try:
            raw = spark.sql(query)._jdf.queryExecution().analyzed()
        finally:
            spark.catalog.dropTempView("batch")
        assert "current_user()" in environment_read(raw), (query, exc)
        return
    assert environment_read(ran._jdf.queryExecution().analyzed()) == []
    rows = [tuple(row) for row in ran.collect()]
    assert rows and all(value in {1, "x1", "y1", "z1"} for row in rows for value in row), rows
