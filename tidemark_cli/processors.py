"""`tidemark processor list` and `tidemark processor run`: processors installed here (entry
points of the group `tidemark.processors`, and TIDEMARK_PROCESSOR_MODULES), and one of them run in
a local SparkSession on the newest items of a connector, read with the workers' own reader."""

import json
import sys

from tidemark_cli.api import quote
from tidemark_cli.config import UsageError
from tidemark_cli.output import emit_json, table

FORMAT_BY_SUFFIX = {".parquet": "parquet", ".json": "json", ".jsonl": "json", ".csv": "csv"}


def _registry():
    from workers.spark import processors

    try:
        processors.load_processor_modules()
    except processors.ProcessorError as exc:
        raise UsageError(str(exc)) from None
    return processors


def cmd_list(api, out, args) -> int:
    names = _registry().processor_names()
    if out.json:
        emit_json(names)
    else:
        print("\n".join(names))
    return 0


def cmd_run(api, out, args) -> int:
    if args.sample < 1 or args.rows < 1:
        raise UsageError("--sample and --rows must be at least 1")
    try:
        params = json.loads(args.params)
    except ValueError as exc:
        raise UsageError(f"--params is not JSON: {exc}") from None
    registry = _registry()
    try:
        processor = registry.get_processor(args.name)
        registry.validate_params(args.name, params)
    except registry.ProcessorError as exc:
        raise UsageError(str(exc)) from None

    connector = api.get(f"connectors/{quote(args.connector)}/")
    if connector["kind"] != "files":
        raise UsageError(
            f"connector {args.connector} is a {connector['kind']} connector; "
            "`processor run` reads the items of files connectors"
        )
    items = api.listing(
        f"connectors/{quote(args.connector)}/items/", limit=args.sample, page_size=args.sample
    )
    if not items:
        raise UsageError(f"connector {args.connector} has no registered items yet")
    items.sort(key=lambda item: item["id"])
    config = connector.get("config") or {}
    locations = [item["item"] for item in items]
    fmt = config.get("format") or _format_of(locations)
    _check_read_options(fmt, config.get("read_options"))

    result = _run_in_spark(
        processor,
        locations,
        fmt,
        config,
        args=args,
        params=params,
        lower=items[0]["id"],
        upper=items[-1]["id"],
    )
    if out.json:
        emit_json({"processor": args.name, "connector": args.connector, "items": items, **result})
        return 0
    print(f"processor {args.name} on {len(items)} item(s) of connector {args.connector}:")
    for location in locations:
        print(f"  {location}")
    print("\nschema:")
    for column in result["schema"]["fields"]:
        nullable = "" if column["nullable"] else " not null"
        print(f"  {column['name']}: {_type_name(column['type'])}{nullable}")
    print(f"\nfirst {len(result['rows'])} row(s):")
    columns = [c["name"] for c in result["schema"]["fields"]]
    table(result["rows"], columns)
    return 0


def _run_in_spark(processor, locations, fmt, config, *, args, params, lower, upper) -> dict:
    from workers.spark.errors import ReadError
    from workers.spark.processors import ProcessorContext, ProcessorError
    from workers.spark.session import get_session, stop_session
    from workers.spark.sources.files import read_items

    print(f"starting Spark ({args.master}) ...", file=sys.stderr, flush=True)
    spark = get_session(args.master, app_name=f"tidemark-sample-{args.name}")
    try:
        spark.sparkContext.setLogLevel("ERROR")
        try:
            df = read_items(
                spark,
                locations,
                fmt,
                options=config.get("read_options"),
                schema=config.get("schema"),
            )
            ctx = ProcessorContext(
                job=f"sample-of-{args.connector}",
                batch_id=0,
                lower=lower,
                upper=upper,
                params=params,
                kind="sample",
            )
            output = processor(df, ctx)
            rows = [row.asDict(recursive=True) for row in output.limit(args.rows).collect()]
        except (ReadError, ProcessorError) as exc:
            raise UsageError(str(exc)) from None
        except Exception as exc:
            from workers.spark.errors import spark_error_summary

            raise UsageError(f"processor {args.name} failed: {spark_error_summary(exc)}") from None
        return {"schema": output.schema.jsonValue(), "rows": rows}
    finally:
        stop_session()


def _check_read_options(fmt: str, options) -> None:
    """The workers' one allowlist of reader options, before Spark starts on this machine: an
    option that would reach Hadoop's configuration (a connector saved before the rule) is one
    line naming it, never applied here."""
    from workers.spark.options import OptionError, normalized_reader_options

    try:
        normalized_reader_options(fmt, options)
    except OptionError as exc:
        raise UsageError(f"connector's read_options: {exc}") from None


def _format_of(locations: list[str]) -> str:
    for location in locations:
        for suffix, fmt in FORMAT_BY_SUFFIX.items():
            if location.lower().endswith(suffix):
                return fmt
    return "parquet"


def _type_name(spark_type) -> str:
    return spark_type if isinstance(spark_type, str) else json.dumps(spark_type)
