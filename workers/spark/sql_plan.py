"""User SQL as Spark reads it: the plan Spark's own parser makes of the exact text it will run.

`sql_guard.check_query` checks the query as sqlglot reads it and returns the text Spark runs
(sqlglot's tree written out again). `check_plan` is the second half of that seam: it asks the
SparkSession's SQL parser (the one `spark.sql` uses, variable substitution included) for the
unresolved logical plan of that text and refuses it unless every node is one Tidemark allows:

- plan nodes: a query's operators only (projection, filter, aggregate, join, set operations,
  sort, limit, window, generate, pivot, sample, inline VALUES, WITH, hints by name), never a
  command, an INSERT, a script transformation, a table-valued function or IDENTIFIER(...);
- relations: one-part names that are the batch's input views or a WITH name in scope (Spark's
  scoping: a WITH definition sees only the definitions before it);
- functions: one-part names `sql_guard.function_allowed` accepts (the same rule the guard uses);
- expressions: Spark's built-in expression classes, minus those that read the session, files or
  the JVM (`DENIED_EXPRESSIONS`); anything from another package is refused.

The plan is read as Spark's JSON form of the tree (one call into the JVM); a field Spark cannot
write there (it writes null) is refused unless it is one of `OPAQUE_FIELDS`, which hold no
expressions, so nothing in the plan goes unchecked. No Django here.
"""

import json

from workers.spark.sql_guard import ALLOWED_HINTS, SqlRefused, function_allowed

_LOGICAL = "org.apache.spark.sql.catalyst.plans.logical."
_ANALYSIS = "org.apache.spark.sql.catalyst.analysis."
_EXPRESSIONS = "org.apache.spark.sql.catalyst.expressions."

ALLOWED_PLAN_NODES = frozenset(
    _LOGICAL + name
    for name in """
    Project Filter Aggregate Sort GlobalLimit LocalLimit Offset Tail Distinct Deduplicate Union
    Intersect Except Join LateralJoin SubqueryAlias UnresolvedWith OneRowRelation LocalRelation
    Generate WithWindowDefinition UnresolvedHint Pivot Unpivot RepartitionByExpression
    Repartition RebalancePartitions Sample
    """.split()
)
ALLOWED_ANALYSIS_NODES = frozenset(
    _ANALYSIS + name
    for name in """
    UnresolvedRelation UnresolvedInlineTable UnresolvedSubqueryColumnAliases UnresolvedHaving
    UnresolvedAttribute UnresolvedStar UnresolvedStarExceptOrReplace UnresolvedAlias
    UnresolvedFunction UnresolvedGenerator UnresolvedExtractValue UnresolvedRegex
    UnresolvedOrdinal NamedParameter PosParameter
    """.split()
)
# built-in expression classes that read the session, the catalog, files or the JVM. The parser
# builds CurrentUser from a bare `current_user` only under ANSI reserved keywords; the analyzer
# does it for any bare `current_user`, `user` or `session_user` no input column answers to, so
# the analyzed plan is checked against this set too (workers/spark/sql_analyzed)
DENIED_EXPRESSIONS = frozenset(
    _EXPRESSIONS + name
    for name in """
    CurrentUser CurrentDatabase CurrentCatalog InputFileName InputFileBlockStart
    InputFileBlockLength CallMethodViaReflection TryReflect SparkVersion VariableReference
    ScalaUDF PythonUDF
    """.split()
)
_EXPRESSION_PACKAGES = (_EXPRESSIONS, _EXPRESSIONS + "aggregate.")

# functions Spark's parser itself calls for SQL syntax (`a BETWEEN x AND y`, `EXTRACT(f FROM t)`,
# `SUBSTRING(s FROM 1 FOR 2)`, `TRIM(BOTH ...)`, `POSITION(a IN b)`, `TIMESTAMPADD(...)`, ...),
# which the guard saw as that syntax, not as a call: all compute from their arguments only
SYNTAX_FUNCTIONS = frozenset(
    """
    between extract date_part substring substr trim btrim ltrim rtrim position overlay
    timestampadd timestampdiff dateadd datediff date_add date_diff percentile_cont
    percentile_disc mode any_value count
    """.split()
)

# (class, field) pairs Spark's JSON writes as null that hold no expression or plan
OPAQUE_FIELDS = frozenset(
    {
        ("UnresolvedRelation", "options"),  # read options of a catalog table (none for a view)
        ("Join", "hint"),
        ("LocalRelation", "data"),  # VALUES rows, already constants
        ("Like", "escapeChar"),
        ("ILike", "escapeChar"),
        ("GroupingSets", "groupingSetIndexes"),
        ("Rollup", "groupingSetIndexes"),
        ("Cube", "groupingSetIndexes"),
        ("UnresolvedWindowExpression", "windowSpec"),  # a reference by name to a WINDOW clause
    }
)
# WithWindowDefinition's definitions (a map Spark's JSON leaves out) are read one by one
_WINDOWS = _LOGICAL + "WithWindowDefinition"


def check_plan(spark, text: str, *, inputs: tuple[str, ...] = ("batch",)) -> None:
    """Raise SqlRefused unless Spark's parser reads `text` as an allowed query over `inputs`."""
    parser = spark._jsparkSession.sessionState().sqlParser()
    try:
        plan = parser.parsePlan(text)
    except Exception as exc:  # a ParseException through py4j: the text is not Spark SQL
        raise SqlRefused(f"is not valid Spark SQL as Spark reads it: {_first_line(exc)}") from None
    nodes = json.loads(plan.toJSON())
    windows = _window_definitions(plan) if _mentions(nodes, _WINDOWS) else []
    allowed = frozenset(name.lower() for name in inputs)
    _check_tree(_rebuild(nodes), allowed, windows)


def _rebuild(flat: list) -> dict:
    """Spark writes a tree as its nodes in pre-order, each with `num-children`: nest them again
    (without recursion: an expression may be thousands deep)."""
    root = {"node": flat[0], "children": []}
    stack = [(root, flat[0].get("num-children", 0))]
    for node in flat[1:]:
        while stack and len(stack[-1][0]["children"]) >= stack[-1][1]:
            stack.pop()
        if not stack:
            raise SqlRefused("holds a plan Tidemark cannot read (a node outside its tree)")
        entry = {"node": node, "children": []}
        stack[-1][0]["children"].append(entry)
        stack.append((entry, node.get("num-children", 0)))
    return root


def _check_tree(root: dict, inputs: frozenset[str], windows: list) -> None:
    # (a rebuilt tree or a field's value, the WITH names in scope)
    work: list[tuple[object, frozenset[str]]] = [(root, frozenset())]
    work.extend((_rebuild(spec), frozenset()) for spec in windows)
    while work:
        item, scope = work.pop()
        if isinstance(item, list):
            if item and all(isinstance(v, dict) and "class" in v for v in item):
                work.append((_rebuild(item), scope))
            else:
                work.extend((v, scope) for v in item)
            continue
        if not isinstance(item, dict):
            continue  # a number, a string or a boolean of a node's field
        if "node" not in item:  # a product (a tuple, an identifier): its fields
            work.extend((v, scope) for k, v in item.items() if k != "product-class")
            continue
        node, children = item["node"], item["children"]
        cls = node["class"]
        _check_node(node, cls, inputs | scope)
        short = cls.rsplit(".", 1)[-1]
        for key, value in node.items():
            if value is None and (short, key) not in OPAQUE_FIELDS and key != "evalMode":
                if not (cls == _WINDOWS and key == "windowDefinitions"):
                    raise SqlRefused(f"holds {short}.{key}, which Tidemark cannot inspect")
        if cls == _LOGICAL + "UnresolvedWith":
            if node.get("allowRecursion"):
                raise SqlRefused("WITH RECURSIVE is not allowed")
            # each definition sees the ones before it; the query under WITH sees them all
            seen = set(scope)
            for relation in node.get("cteRelations") or []:
                name = str(relation.get("_1", ""))
                work.append((relation.get("_2"), frozenset(seen)))
                seen.add(name.lower())
            work.extend((child, frozenset(seen)) for child in children)
            continue
        work.extend((child, scope) for child in children)
        for key, value in node.items():
            if key not in ("class", "num-children") and isinstance(value, (list, dict)):
                work.append((value, scope))


def _check_node(node: dict, cls: str, readable: frozenset[str]) -> None:
    short = cls.rsplit(".", 1)[-1]
    if cls == _ANALYSIS + "UnresolvedRelation":
        name = _one_part(node.get("multipartIdentifier"))
        if name is None or name.lower() not in readable:
            raise SqlRefused(
                f"relation {node.get('multipartIdentifier')} is not allowed as Spark reads the "
                "query: only the batch's input and the query's own WITH names may be read"
            )
    elif cls == _ANALYSIS + "UnresolvedFunction":
        name = _one_part(node.get("nameParts"))
        if name is None or not (name.lower() in SYNTAX_FUNCTIONS or function_allowed(name)):
            raise SqlRefused(
                f"function {node.get('nameParts')} is not allowed as Spark reads the query "
                "(see docs/security.md, User SQL)"
            )
    elif cls == _ANALYSIS + "UnresolvedGenerator":
        identifier = node.get("name") or {}
        name = identifier.get("funcName")
        qualified = identifier.get("database") or identifier.get("catalog")
        if not isinstance(name, str) or qualified or not function_allowed(name):
            raise SqlRefused(f"generator {name} is not allowed as Spark reads the query")
    elif cls == _LOGICAL + "UnresolvedHint":
        if str(node.get("name", "")).upper() not in ALLOWED_HINTS:
            raise SqlRefused(f"hint {node.get('name')} is not allowed as Spark reads the query")
    elif cls in ALLOWED_PLAN_NODES or cls in ALLOWED_ANALYSIS_NODES:
        pass
    elif _built_in_expression(cls):
        if cls in DENIED_EXPRESSIONS:
            raise SqlRefused(f"{short} is not allowed inside a query")
    else:
        raise SqlRefused(
            f"{short} is not allowed: Spark reads the query as more than a query over the batch"
        )


def _built_in_expression(cls: str) -> bool:
    """A class directly in one of the expression packages (not in a subpackage such as xml)."""
    return any(
        cls.startswith(package) and "." not in cls[len(package) :]
        for package in _EXPRESSION_PACKAGES
    )


def _one_part(rendered) -> str | None:
    """The name in Spark's rendering of a one-part name (`[batch]`); None for any other."""
    if not isinstance(rendered, str) or not (rendered.startswith("[") and rendered.endswith("]")):
        return None
    inner = rendered[1:-1]
    if not inner or ", " in inner or "[" in inner or "]" in inner or "." in inner:
        return None
    return inner


def _mentions(nodes, cls: str) -> bool:
    return f'"{cls}"' in json.dumps(nodes)


def _window_definitions(plan) -> list:
    """The WINDOW clauses' specifications of every WithWindowDefinition in `plan`, each as Spark's
    JSON of its tree (the map holding them is what the plan's JSON leaves out)."""
    found, stack = [], [plan]
    try:
        while stack:
            node = stack.pop()
            if node.getClass().getName() == _WINDOWS:
                values = node.windowDefinitions().values().iterator()
                while values.hasNext():
                    found.append(json.loads(values.next().toJSON()))
            for getter in ("children", "innerChildren", "subqueries"):
                items = getattr(node, getter)().iterator()
                while items.hasNext():
                    stack.append(items.next())
    except Exception:
        raise SqlRefused("holds a WINDOW clause Tidemark cannot inspect") from None
    return found


def _first_line(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__
