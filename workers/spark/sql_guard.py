"""User SQL (the `sql` processor's query): one query over the batch's input, nothing else.

Spark SQL can reach far beyond a batch: `java_method`/`reflect` call any JVM method,
``text.`/etc/hostname` `` reads any file, `read_files` lists directories, `${env:NAME}` substitutes
an environment variable into the text, statements change the session (`SET`, `ADD JAR`,
`CREATE ...`). `check_query` parses the text with sqlglot's Spark dialect and allows only:

- one statement, and that statement a query (SELECT, WITH, VALUES, UNION / INTERSECT / EXCEPT);
- relations that are the batch's input views (`inputs`, e.g. `batch`) or the query's own CTEs,
  never qualified (`db.table`, ``parquet.`/path` ``) and never a table function (`range(...)`,
  `read_files(...)`, `IDENTIFIER(...)`);
- functions from an allow-list: the functions sqlglot knows as typed expressions (standard SQL
  and Spark built-ins that compute from their arguments), except those that read the session or
  the world (`NOT_PURE_TYPED`), plus the named Spark built-ins in `PURE_SPARK_FUNCTIONS`. Any other
  name (a UDF, `java_method`, `reflect`, `xpath`, `from_xml`, `input_file_name`, ...) is refused;
- no `${...}` anywhere in the text (Spark's variable substitution);
- no script transformation (`SELECT TRANSFORM(...) USING 'command'`: Spark runs the command as a
  process on the executors) and no table property (`ROW FORMAT SERDE '<class>'`, ...).

- at most `MAX_QUERY_BYTES` of text and brackets at most `MAX_QUERY_NESTING` deep, checked before
  parsing; WITH names only inside their scope (`visible_ctes`); hints by name (`ALLOWED_HINTS`);
  no comment the two parsers read differently (`check_comments`).

Anything refused raises `SqlRefused` naming the construct. What runs is never the user's text:
`check_query` returns the checked tree written out again in Spark's dialect (no comments), so a
difference between sqlglot's lexer and Spark's cannot change what runs; on the worker the plan
Spark's own parser makes of that text is checked too (`sql_plan.check_plan`), and so is
the plan its analyzer resolves (`sql_analyzed.check_analyzed`). The check runs when
a job is saved (through the processor's validator), before each batch and again right before
`spark.sql`, so a job stored before the check existed cannot run a refused query. No Django here.
"""

import functools
import re

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

_QUERY_TYPES = (exp.Select, exp.Union, exp.Intersect, exp.Except, exp.Values, exp.Subquery)

# typed functions sqlglot knows that read the session, the catalog, files or the network
NOT_PURE_TYPED = frozenset(
    {
        "CurrentAccount",
        "CurrentAccountName",
        "CurrentAvailableRoles",
        "CurrentCatalog",
        "CurrentClient",
        "CurrentDatabase",
        "CurrentIpAddress",
        "CurrentOrganizationName",
        "CurrentOrganizationUser",
        "CurrentRegion",
        "CurrentRole",
        "CurrentRoleType",
        "CurrentSchema",
        "CurrentSchemas",
        "CurrentSecondaryRoles",
        "CurrentSession",
        "CurrentStatement",
        "CurrentTransaction",
        "CurrentUser",
        "CurrentUserId",
        "CurrentVersion",
        "CurrentWarehouse",
        "SessionUser",
        "ReadCSV",
        "ReadParquet",
        "Secret",
        "NetFunc",
        "Predict",
        "GenerateEmbedding",
        "GenerateTable",
        "GenerateText",
        "FeaturesAtTime",
        "VectorSearch",
        "ToFile",
        "Anonymous",
        "AnonymousAggFunc",
        "Apply",
        "DynamicIdentifier",
        "ObjectId",
    }
)


def _typed_pure() -> frozenset[type]:
    allowed = set()
    for cls in exp.ALL_FUNCTIONS:
        name = cls.__name__
        if name in NOT_PURE_TYPED or name.startswith(("AI", "ML", "AIForecast")):
            continue
        allowed.add(cls)
    return frozenset(allowed)


PURE_TYPED = _typed_pure()

# Spark built-ins that sqlglot parses as plain (anonymous) calls and that compute only from their
# arguments (and, for rand-like ones, a seed): no JVM reflection, files, network, catalog or session
PURE_SPARK_FUNCTIONS = frozenset(
    """
    acos acosh aggregate array_join array_repeat arrays_overlap ascii asin asinh atan atan2
    atanh base64 bin bit_and bit_count bit_get bit_or bit_xor bool_and bool_or bround btrim
    cardinality cast ceiling char char_length character_length coalesce collect_list
    collect_set concat contains conv cos cosh cot count_min_sketch crc32 csc date_diff
    date_format date_from_unix_date date_part datepart dateadd day dayofmonth dayofweek
    dayofyear decode e element_at encode endswith every exists expm1 find_in_set float
    forall format_number format_string from_csv from_unixtime from_utc_timestamp get
    get_json_object getbit hash hex histogram_numeric hypot ifnull ilike inline_outer instr
    int isnan isnotnull isnull json_array_length json_object_keys json_tuple kurtosis last_day
    lcase len length levenshtein like ln locate log10 log1p log2 lower lpad ltrim luhn_check
    make_date make_dt_interval make_interval make_timestamp make_timestamp_ltz
    make_timestamp_ntz make_ym_interval map_concat map_contains_key map_entries map_filter
    map_from_arrays map_from_entries map_keys map_values map_zip_with mask max_by md5 min_by
    mod monotonically_increasing_id named_struct negative now nullifzero nvl octet_length
    percentile percentile_approx pmod posexplode_outer position positive pow printf
    regexp regexp_like replace rint rlike round rpad rtrim schema_of_csv schema_of_json sec
    sentences sequence sha sha1 sha2 shiftleft shiftright shiftrightunsigned shuffle sign
    signum sinh size slice smallint some sort_array spark_partition_id split_part sqrt
    startswith std stddev str_to_map string struct substr substring_index sum tanh
    timestamp_micros timestamp_millis timestamp_seconds tinyint to_binary to_char to_csv
    to_date to_json to_number to_timestamp to_timestamp_ltz to_timestamp_ntz to_unix_timestamp
    to_utc_timestamp to_varchar transform_keys transform_values trim try_add try_avg
    try_divide try_element_at try_multiply try_subtract try_sum try_to_binary try_to_number
    try_to_timestamp typeof ucase unbase64 unhex unix_date unix_micros unix_millis
    unix_seconds unix_timestamp upper url_decode url_encode uuid weekday weekofyear
    width_bucket window window_time xxhash64 year zeroifnull zip_with
    """.split()
)


class SqlRefused(ValueError):
    """The query is not one Tidemark runs; the message names the construct."""


# bounds checked on the text before it is parsed: sqlglot's parser takes seconds per 64 KiB and
# recurses about twenty frames per bracket level (an 8 MB text held a web worker for 35 s)
MAX_QUERY_BYTES = 64 * 1024
MAX_QUERY_NESTING = 32

# Spark's hints, by name; their arguments may only be names and numbers
JOIN_HINTS = frozenset(
    "BROADCAST BROADCASTJOIN MAPJOIN MERGE SHUFFLE_MERGE MERGEJOIN SHUFFLE_HASH "
    "SHUFFLE_REPLICATE_NL".split()
)
PARTITION_HINTS = frozenset("COALESCE REPARTITION REPARTITION_BY_RANGE REBALANCE".split())
ALLOWED_HINTS = JOIN_HINTS | PARTITION_HINTS


def check_query(query: str, *, inputs: tuple[str, ...] = ("batch",)) -> str:
    """Raise SqlRefused unless `query` is one Spark SQL query over `inputs` (view names) using
    only allowed functions; return the text to run: the checked tree written out again (no
    comments, no whitespace of the user's), never `query` itself, so no difference between how
    sqlglot and Spark read comments, quotes or escapes can change what runs."""
    if not isinstance(query, str) or not query.strip():
        raise SqlRefused("must be a non-empty SQL query")
    check_query_size(query)
    if "${" in query:
        raise SqlRefused("'${...}' (Spark variable substitution) is not allowed")
    check_comments(query)
    tree = _parse_one(query)
    check_tree(tree, inputs=inputs)
    try:
        text = tree.sql(dialect="spark", comments=False)
    except RecursionError:
        raise SqlRefused("nests too deeply to be checked; simplify the query") from None
    # the written text must hold no substitution either: spark.sql replaces ${...} before parsing
    if "${" in text:
        raise SqlRefused("'${...}' (Spark variable substitution) is not allowed")
    return text


def check_query_size(query: str) -> None:
    """Refuse a text too large or too deeply bracketed to parse in bounded time and stack."""
    size = len(query.encode("utf-8", "surrogatepass"))
    if size > MAX_QUERY_BYTES:
        raise SqlRefused(
            f"is {size:,} bytes; the limit is {MAX_QUERY_BYTES:,} bytes ({MAX_QUERY_BYTES // 1024} KiB)"
        )
    depth = deepest = 0
    # counted in the raw text (literals and comments included): a bound, not a parse
    for char in query:
        if char in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in ")]}":
            depth = max(depth - 1, 0)
    if deepest > MAX_QUERY_NESTING:
        raise SqlRefused(
            f"nests brackets {deepest} deep; the limit is {MAX_QUERY_NESTING} "
            "(counted in the text, literals included)"
        )


def check_comments(query: str) -> None:
    """Refuse the comments sqlglot and Spark read differently, so a text that would mean two
    things is refused when saved instead of being run as sqlglot reads it: a comment opened
    inside a bracketed comment (`/* /*+ */ X -- */`: sqlglot nests it, Spark does not) and a
    `--` comment whose line ends in a backslash (Spark continues it on the next line, sqlglot
    does not). Only a courtesy: what runs is the checked tree written out again either way."""
    i, n = 0, len(query)
    while i < n:
        char = query[i]
        if char in "'\"`":
            i = _past_quoted(query, i)
        elif query.startswith("--", i):
            end = query.find("\n", i)
            line = query[i : n if end < 0 else end].rstrip("\r")
            if line.endswith("\\"):
                raise SqlRefused(
                    "has a '--' comment ending in a backslash, which Spark continues onto the "
                    "next line; end the comment without one"
                )
            i = n if end < 0 else end + 1
        elif query.startswith("/*", i):
            end = query.find("*/", i + 2)
            body = query[i + 2 : n if end < 0 else end]
            if "/*" in body:
                raise SqlRefused(
                    "has a comment opened inside a /* ... */ comment, which Spark and the check "
                    "would read differently; remove the inner '/*'"
                )
            i = n if end < 0 else end + 2
        else:
            i += 1


def _past_quoted(query: str, start: int) -> int:
    """The index after the quoted literal or identifier opened at `start` (a backslash escapes
    the next character in strings, as Spark reads them; a backquote is doubled)."""
    quote, i, n = query[start], start + 1, len(query)
    while i < n:
        if query[i] == "\\" and quote != "`":
            i += 2
        elif query[i] == quote:
            return i + 1
        else:
            i += 1
    return n


def _parse_one(query: str) -> exp.Expression:
    try:
        statements = [s for s in sqlglot.parse(query, read="spark") if s is not None]
    except (ParseError, TokenError) as exc:
        raise SqlRefused(f"is not valid Spark SQL: {_first_line(exc)}") from None
    except RecursionError:
        raise SqlRefused("nests too deeply to be checked; simplify the query") from None
    except Exception as exc:
        # sqlglot's function builders raise plain errors on a wrong argument count
        # (`map(a)`: IndexError): still the query's fault, never a server error
        raise SqlRefused(
            f"is not valid Spark SQL: {type(exc).__name__} while parsing it "
            "(a function called with the wrong number of arguments?)"
        ) from None
    if len(statements) != 1:
        raise SqlRefused(f"must be exactly one query, got {len(statements)} statements")
    return statements[0]


def check_tree(tree: exp.Expression, *, inputs: tuple[str, ...]) -> None:
    """Raise SqlRefused unless the parsed `tree` is one allowed query over `inputs`."""
    if not isinstance(tree, _QUERY_TYPES):
        raise SqlRefused(
            f"must be a query (SELECT, WITH, VALUES or a set operation), not {_construct(tree)}"
        )
    allowed = {name.lower() for name in inputs}
    for node in tree.walk():
        if isinstance(node, exp.Hint):
            _check_hint(node)
        elif node.find_ancestor(exp.Hint):
            continue  # checked with its hint
        elif isinstance(node, exp.With) and node.args.get("recursive"):
            raise SqlRefused("WITH RECURSIVE is not allowed")
        elif isinstance(node, exp.Table):
            _check_relation(node, allowed | visible_ctes(node), inputs)
        elif isinstance(node, exp.Func):
            _check_function(node)
        elif isinstance(node, exp.QueryTransform):
            # Spark runs the USING command as a process on the executors (no Hive needed)
            raise SqlRefused(
                "TRANSFORM ... USING (a script the workers would run) is not allowed; "
                "compute with SQL functions"
            )
        elif isinstance(node, (exp.Command, exp.Set, exp.DDL, exp.DML, exp.Property)):
            raise SqlRefused(f"{_construct(node)} is not allowed inside a query")


def visible_ctes(node: exp.Expression) -> set[str]:
    """The WITH names a relation at `node` may read, as Spark scopes them: those of every
    enclosing query, and inside a WITH's own definitions only the ones defined before (Spark's
    WITH is not recursive: a name read inside its own definition is a table of the catalog)."""
    names: set[str] = set()
    child, parent = node, node.parent
    while parent is not None:
        if isinstance(parent, exp.With):
            earlier = []
            for cte in parent.expressions:
                if cte is child:
                    break
                earlier.append(cte)
            names.update(cte.alias_or_name.lower() for cte in earlier)
        else:
            with_ = parent.args.get("with_")
            if isinstance(with_, exp.With) and child is not with_:
                names.update(cte.alias_or_name.lower() for cte in with_.expressions)
        child, parent = parent, parent.parent
    return names


def _check_hint(hint: exp.Hint) -> None:
    for entry in hint.expressions:
        if isinstance(entry, exp.JoinHint):
            name = str(entry.this)
        elif isinstance(entry, exp.Anonymous):
            name = str(entry.name)
        elif isinstance(entry, exp.Func):
            name = entry.sql_name()
        else:
            name = entry.sql("spark")
        if name.upper() not in ALLOWED_HINTS:
            raise SqlRefused(
                f"hint {name} is not allowed; allowed hints: {', '.join(sorted(ALLOWED_HINTS))}"
            )
        for arg in entry.iter_expressions():
            for node in arg.walk():
                plain_number = isinstance(node, exp.Literal) and not node.is_string
                plain_name = isinstance(node, (exp.Identifier, exp.Column)) or (
                    isinstance(node, exp.Table) and set(node.args) <= {"this"}
                )
                if not (plain_number or plain_name):
                    raise SqlRefused(
                        f"hint {name.upper()} may only name columns or relations and give numbers"
                    )


@functools.lru_cache(maxsize=4096)
def function_allowed(name: str) -> bool:
    """Whether a call of the function `name`, as Spark names it in a plan, is one the guard
    allows: the same decision `check_query` makes for `name(...)` (tried with zero to three
    arguments, as sqlglot's builders want a count)."""
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        return False
    if name.lower() in PURE_SPARK_FUNCTIONS:
        return True
    for count in range(4):
        arguments = ", ".join(["a"] * count)
        try:
            tree = sqlglot.parse_one(f"SELECT {name}({arguments}) FROM batch", read="spark")
        except Exception:
            continue
        called = tree.expressions[0] if isinstance(tree, exp.Select) else None
        if not isinstance(called, exp.Func):
            continue
        try:
            for node in called.walk():
                if isinstance(node, exp.Func):
                    _check_function(node)
        except SqlRefused:
            return False
        return True
    return False


def _check_relation(node: exp.Table, allowed: set[str], inputs: tuple[str, ...]) -> None:
    if not isinstance(node.this, exp.Identifier):
        name = node.this.name if isinstance(node.this, exp.Func) else node.this.sql("spark")
        raise SqlRefused(f"table function {name}(...) is not allowed; read the input view")
    if node.args.get("db") is not None or node.args.get("catalog") is not None:
        raise SqlRefused(
            f"relation {node.sql('spark')} is not allowed: only the batch's input "
            f"({', '.join(inputs)}) and the query's own WITH names may be read"
        )
    if node.name.lower() not in allowed:
        raise SqlRefused(
            f"relation {node.name} is not allowed: only the batch's input "
            f"({', '.join(inputs)}) and the query's own WITH names may be read"
        )


def _check_function(node: exp.Func) -> None:
    if isinstance(node, exp.Anonymous):
        name = str(node.name)
        if name.lower() not in PURE_SPARK_FUNCTIONS:
            raise SqlRefused(f"function {name}() is not allowed (see docs/security.md, User SQL)")
        return
    if type(node) not in PURE_TYPED:
        raise SqlRefused(
            f"function {node.sql_name().lower()}() is not allowed (see docs/security.md, User SQL)"
        )


def _construct(node: exp.Expression) -> str:
    if isinstance(node, exp.Command):
        return f"the statement {str(node.this).upper()}"
    return f"{node.key.upper()} (a statement)"


def _first_line(exc: Exception) -> str:
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc)).strip()
    return text.splitlines()[0] if text else type(exc).__name__
