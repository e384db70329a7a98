"""User SQL as Spark resolves it: the analyzed plan `spark.sql` made of the checked text.

`sql_plan.check_plan` reads the parser's plan, where a bare name is still an unresolved column.
Spark's analyzer then resolves a bare `current_user`, `user` or `session_user` (backquoted too)
that no input column answers to the function `current_user()`, which gives the worker's OS user
name; refusing those names before analysis would refuse a query over an input column named
`user`. So `check_analyzed` reads the plan Spark will run (analysis is done when `spark.sql`
returns; nothing has run yet) and refuses it unless every node of the query's own part is one
Tidemark allows:

- plan nodes: Spark's logical operators (`catalyst.plans.logical`); an input view (`View`, the
  batch's rows) is not looked into, anything else (a relation of another kind) is refused;
- expressions: Spark's built-in expression classes (`catalyst.expressions` and its packages but
  `xml`), minus `sql_plan.DENIED_EXPRESSIONS` (the session, the catalog, files, the JVM, session
  variables); anything from another package (a UDF) is refused.

Each operator's expressions are read as Spark's JSON of each expression's tree (all of them:
Spark's own `expressions` of the node, so no field is left out) and a subquery's plan is walked
like the query's. No Django here.
"""

import json

from workers.spark.sql_guard import SqlRefused
from workers.spark.sql_plan import DENIED_EXPRESSIONS, _rebuild

_LOGICAL = "org.apache.spark.sql.catalyst.plans.logical."
_EXPRESSIONS = "org.apache.spark.sql.catalyst.expressions."
_VIEW = _LOGICAL + "View"

# the SQL a denied class comes from, for the batch error
_SQL_NAMES = {
    "CurrentUser": "current_user (also a bare `user` or `session_user`)",
    "CurrentDatabase": "current_database",
    "CurrentCatalog": "current_catalog",
    "SparkVersion": "version",
    "InputFileName": "input_file_name",
    "InputFileBlockStart": "input_file_block_start",
    "InputFileBlockLength": "input_file_block_length",
    "CallMethodViaReflection": "reflect",
    "TryReflect": "try_reflect",
    "VariableReference": "a session variable",
}


def check_analyzed(df) -> None:
    """Raise SqlRefused unless the analyzed plan of `df` (the result of `spark.sql`) computes
    only from the batch's input with Spark's built-in expressions."""
    plans = [df._jdf.queryExecution().analyzed()]
    while plans:
        plan = plans.pop()
        cls = plan.getClass().getName()
        if cls == _VIEW:
            continue  # the batch's view: its rows are the input, not the query
        if not _direct(cls, _LOGICAL):
            raise SqlRefused(
                f"{_short(cls)} is not allowed: Spark resolves the query to more than a query "
                "over the batch"
            )
        for expression in _items(plan.expressions()):
            _check_expression(json.loads(expression.toJSON()))
        plans.extend(_items(plan.children()))
        plans.extend(_items(plan.subqueries()))  # walked as plans (their fields in full)


def _check_expression(flat: list) -> None:
    work: list = [_rebuild(flat)]
    while work:
        item = work.pop()
        if isinstance(item, list):
            if item and all(isinstance(v, dict) and "class" in v for v in item):
                if str(item[0]["class"]).startswith(_LOGICAL):
                    continue  # a subquery's plan: `check_analyzed` walks it from the JVM
                work.append(_rebuild(item))
            else:
                work.extend(item)
            continue
        if not isinstance(item, dict):
            continue
        if "node" not in item:  # a product (an ExprId, a data type's field): its fields
            work.extend(v for k, v in item.items() if k != "product-class")
            continue
        node = item["node"]
        _check_expression_class(str(node.get("class")))
        work.extend(item["children"])
        work.extend(v for k, v in node.items() if k not in ("class", "num-children"))


def _check_expression_class(cls: str) -> None:
    short = _short(cls)
    if cls in DENIED_EXPRESSIONS:
        name = _SQL_NAMES.get(short, short)
        raise SqlRefused(
            f"uses {name}, which Spark resolves to {short}: it reads the worker's session or "
            "environment, not the batch (to read an input column of that name where Spark does "
            "not see it, e.g. in an ORDER BY of a column not selected, qualify it: `batch.user`)"
        )
    if not cls.startswith(_EXPRESSIONS) or cls.startswith(_EXPRESSIONS + "xml."):
        raise SqlRefused(f"{short} is not allowed inside a query")


def _direct(cls: str, package: str) -> bool:
    return cls.startswith(package) and "." not in cls[len(package) :]


def _short(cls: str) -> str:
    return cls.rsplit(".", 1)[-1]


def _items(seq):
    """A Scala collection's elements, one by one through py4j."""
    iterator = seq.iterator()
    while iterator.hasNext():
        yield iterator.next()
