"""`example_customer_totals`: order events -> per customer the number of orders and their sum.

Registered on import; the package's entry point names this module, so installing the package is
all a worker needs. The function only transforms: Tidemark reads the batch's files before it and
writes the sink after it, so it can be tested with a SparkSession and nothing else.
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from workers.spark.processors import ProcessorContext, ProcessorError, register, require_columns


def _validate(params: dict) -> None:
    # checked when a job naming this processor is saved: a bad value is a 400 naming `params`
    minimum = params.get("min_amount", 0)
    if isinstance(minimum, bool) or not isinstance(minimum, int | float) or minimum < 0:
        raise ProcessorError(f"param 'min_amount' must be a number >= 0, got {minimum!r}")


@register("example_customer_totals", validate=_validate)
def customer_totals(df: DataFrame, ctx: ProcessorContext) -> DataFrame:
    """Orders of at least params["min_amount"] (default 0), counted once per order_id, grouped
    by customer: customer_id, orders, total (rounded to cents)."""
    _validate(ctx.params)
    require_columns(df, ["order_id", "customer_id", "amount"], processor="example_customer_totals")
    minimum = ctx.params.get("min_amount", 0)
    orders = df.where(F.col("amount") >= F.lit(minimum)).dropDuplicates(["order_id"])
    return (
        orders.groupBy("customer_id")
        .agg(F.count("order_id").alias("orders"), F.round(F.sum("amount"), 2).alias("total"))
        .orderBy("customer_id")
    )
