"""A batch spec as the worker hands it to `run_batch`, for tests that run batches without the
control plane (`spec_for`)."""


def spec_for(items, sink, **extra):
    return {
        "job": "orders-hourly",
        "batch_id": 11,
        "kind": "incremental",
        "lower": 1,
        "upper": 3,
        "items": items,
        "format": "parquet",
        "read_options": {},
        "schema": None,
        "lineage": False,
        "processor": "orders_hourly",
        "params": {},
        "sink": sink,
        **extra,
    }
