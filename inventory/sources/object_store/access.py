"""Reaching an object store: which URL schemes are allowed, the credential keys (environment
variable names only), the s3fs/fsspec filesystem for a config, the config's own keys checked, and the probe a connector save runs."""

import os

from inventory.services import endpoints
from inventory.services.errors import InvalidInput
from inventory.services.secrets import credential_value
from inventory.services.urls import url_parse

# a bucket that does not answer fails the connector's save in seconds, not minutes
_CONNECT = {"connect_timeout": 5, "read_timeout": 20, "retries": {"max_attempts": 2}}
# and one listing page, retries and all, is given this long as a whole: botocore's timeouts bound
# each read, not a request whose connection never frees or an event loop that stopped answering
LIST_TIMEOUT_SECONDS = 60

CREDENTIAL_KEYS = ("key_env", "secret_env", "session_token_env")
S3_SCHEMES = ("s3", "s3a")
LISTINGS = ("start_after", "full")
# Object stores reached by their own public endpoints (or a configured endpoint_url, confined
# by endpoints.py), and fsspec's in-memory store. Local-file-backed, archive and chained
# filesystems (`file://`, `local://`, `zip://`, `a::b`) could read this machine's files; plain
# http(s) only at an allowed endpoint.
OBJECT_STORE_SCHEMES = (*S3_SCHEMES, "gs", "gcs", "az", "abfs", "abfss", "memory")


def check_scheme(path: str, scheme: str) -> None:
    if "::" in path:
        raise InvalidInput("config.path", "chained fsspec URLs (a::b) are not accepted")
    if scheme in ("http", "https"):
        endpoints.url_check(path, field="config.path")
    elif scheme not in OBJECT_STORE_SCHEMES:
        raise InvalidInput(
            "config.path",
            f"{scheme}:// is not an object store Tidemark reads; use one of "
            f"{', '.join(OBJECT_STORE_SCHEMES)} (or an absolute directory path under "
            "TIDEMARK_ALLOWED_ROOTS)",
        )


def check_keys(config: dict, scheme: str) -> None:
    import fsspec

    check_scheme(config["path"], scheme)
    try:
        fsspec.get_filesystem_class(scheme)
    except (ValueError, ImportError) as exc:
        raise InvalidInput("config.path", f"no filesystem for {scheme}:// URLs: {exc}") from exc
    for key in ("endpoint_url", "region"):
        value = config.get(key)
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise InvalidInput(f"config.{key}", "must be a non-empty string")
    endpoint = config.get("endpoint_url")
    if endpoint is not None and url_parse(endpoint, field="config.endpoint_url").scheme not in (
        "http",
        "https",
    ):
        raise InvalidInput("config.endpoint_url", "must be an http:// or https:// URL")
    listing = config.get("listing", "start_after" if scheme in S3_SCHEMES else "full")
    if listing not in LISTINGS:
        raise InvalidInput("config.listing", f"must be one of {', '.join(LISTINGS)}")
    if listing == "start_after" and scheme not in S3_SCHEMES:
        raise InvalidInput("config.listing", "start_after listing needs an s3:// path; use full")
    if not isinstance(config.get("spark_native", False), bool):
        raise InvalidInput("config.spark_native", "must be true or false")
    if scheme not in S3_SCHEMES:
        given = [key for key in (*CREDENTIAL_KEYS, "endpoint_url", "region") if key in config]
        if given:
            raise InvalidInput(f"config.{given[0]}", f"only used with s3:// paths, not {scheme}://")
        return
    if ("key_env" in config) != ("secret_env" in config):
        missing = "secret_env" if "key_env" in config else "key_env"
        raise InvalidInput(f"config.{missing}", "key_env and secret_env are given together")
    for key in CREDENTIAL_KEYS:
        name = config.get(key)
        if name is not None and not os.environ.get(name):
            raise InvalidInput(
                f"config.{key}",
                f"environment variable {name} is not set in the Tidemark process; set it there "
                "(and on the workers) before saving the connector",
            )


def s3_location(path: str) -> tuple[str, str]:
    """(bucket, key prefix) of an `s3://bucket/prefix` URL; a prefix ends with `/` unless empty."""
    parsed = url_parse(path, field="config.path")
    prefix = parsed.path.lstrip("/")
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return parsed.netloc, prefix


def s3_filesystem(config: dict):
    """An s3fs filesystem for the config, credentials read from the named environment variables
    (none named: botocore's usual chain, e.g. an instance role)."""
    import s3fs

    # checked before any request: credentials only from allowed variables, only to an allowed
    # endpoint (none given: AWS's own)
    if config.get("endpoint_url"):
        endpoints.url_check(config["endpoint_url"], field="config.endpoint_url")
    options = {}
    if config.get("key_env"):
        options["key"] = credential_value(config["key_env"], field="config.key_env")
        options["secret"] = credential_value(config["secret_env"], field="config.secret_env")
    if config.get("session_token_env"):
        options["token"] = credential_value(
            config["session_token_env"], field="config.session_token_env"
        )
    client = {"region_name": config["region"]} if config.get("region") else {}
    return s3fs.S3FileSystem(
        endpoint_url=config.get("endpoint_url"),
        client_kwargs=client,
        config_kwargs=_CONNECT,
        skip_instance_cache=True,
        **options,
    )


def list_page(fs, **request) -> dict:
    """One ListObjectsV2 call, bounded by LIST_TIMEOUT_SECONDS as a whole (fsspec's `sync`
    timeout): a store that stops answering fails the listing naming `config.path`, never hangs
    the process that asked (a worker's discovery step, an operator's "look now")."""
    from fsspec.exceptions import FSTimeoutError

    try:
        return fs.call_s3("list_objects_v2", timeout=LIST_TIMEOUT_SECONDS, **request)
    except FSTimeoutError as exc:
        raise InvalidInput(
            "config.path",
            f"listing s3://{request['Bucket']}/{request.get('Prefix', '')} got no answer "
            f"within {LIST_TIMEOUT_SECONDS} s",
        ) from exc


def probe_s3(config: dict) -> None:
    bucket, prefix = s3_location(config["path"])
    if not bucket:
        raise InvalidInput("config.path", "must name a bucket: s3://bucket/prefix/")
    fs = s3_filesystem(config)
    where = config.get("endpoint_url") or "AWS S3"
    try:
        list_page(fs, Bucket=bucket, Prefix=prefix, MaxKeys=1)
    except InvalidInput:
        raise
    except FileNotFoundError as exc:
        raise InvalidInput("config.path", f"bucket {bucket} does not exist at {where}") from exc
    except PermissionError as exc:
        raise InvalidInput(
            "config.path", f"access to s3://{bucket}/{prefix} is denied with the given credentials"
        ) from exc
    except Exception as exc:  # unreachable endpoint, bad region, TLS: botocore's own words
        raise InvalidInput("config.path", f"cannot list s3://{bucket}/{prefix}: {exc}") from exc


def probe_fsspec(config: dict) -> None:
    fs, root = fsspec_root(config["path"])
    try:
        found = fs.isdir(root)
    except Exception as exc:
        raise InvalidInput("config.path", f"cannot reach {config['path']}: {exc}") from exc
    if not found:
        raise InvalidInput("config.path", f"{config['path']} is not a directory")


def fsspec_root(path: str):
    import fsspec

    fs, root = fsspec.core.url_to_fs(path)
    return fs, root.rstrip("/")
