"""Where a credential may be sent: the endpoints the deployment allows.

The setting `TIDEMARK_ALLOWED_ENDPOINTS` lists `scheme://host[:port]` entries; an entry without a
port allows every port of that host. Hosts are compared as written (lower-cased; no DNS lookup),
so `localhost` and `127.0.0.1` are different entries. A kind's public default needs no entry: an
s3:// connector without `endpoint_url` talks to AWS's own endpoints.

What is matched, per kind (always before any connection is opened):

- object stores: `endpoint_url` (`http://minio:9000` -> scheme http, host minio, port 9000; no
  port: 80/443), and the URL of an http(s) fsspec path, both read by `urls.url_parse` (ASCII
  hosts only, no userinfo; anything else is a 400 naming the field);
- PostgreSQL DSNs read from `dsn_env` (URL or key/value form): every `host` (and `hostaddr`)
  with its `port` (default 5432) as `postgresql://host:port`; a unix-socket directory as
  `postgresql:///socket/dir` (the directory, resolved). A DSN without a host (libpq's defaults)
  or naming a `service` is refused: where it goes is decided outside the DSN;
- Kafka with SASL credentials: every bootstrap server as `kafka://host:port`.
"""

import os
from urllib.parse import urlparse

from django.conf import settings

from inventory.services.errors import InvalidInput
from inventory.services.urls import url_parse

DEFAULT_PORTS = {"http": 80, "https": 443, "postgresql": 5432}
_SCHEME_ALIASES = {"postgres": "postgresql"}


def _scheme(value: str) -> str:
    value = value.lower()
    return _SCHEME_ALIASES.get(value, value)


def _allowed() -> list[tuple[str, str, int | None]]:
    entries = []
    for entry in settings.TIDEMARK_ALLOWED_ENDPOINTS:
        try:
            parsed = urlparse(entry)
        except ValueError:
            continue  # settings_check reports it; an unusable entry allows nothing
        if not parsed.netloc and parsed.path.startswith("/"):  # scheme:///socket/dir
            entries.append((_scheme(parsed.scheme), os.path.realpath(parsed.path), None))
            continue
        try:
            port = parsed.port
        except ValueError:
            continue  # settings_check reports it; an unusable entry allows nothing
        entries.append((_scheme(parsed.scheme), (parsed.hostname or "").lower(), port))
    return entries


def endpoint_allowed(scheme: str, host: str, port: int | None) -> bool:
    scheme = _scheme(scheme)
    host = host if host.startswith("/") else host.lower()
    return any(
        scheme == allowed_scheme and host == allowed_host and allowed_port in (None, port)
        for allowed_scheme, allowed_host, allowed_port in _allowed()
    )


def endpoint_check(scheme: str, host: str, port: int | None, *, field: str) -> None:
    """InvalidInput naming `field` and the setting when the endpoint is not allowed."""
    if endpoint_allowed(scheme, host, port):
        return
    where = f"{_scheme(scheme)}://{host}" + (f":{port}" if port is not None else "")
    raise InvalidInput(
        field,
        f"{where} is not an endpoint this deployment sends credentials to; an administrator "
        "allows it by adding it to the setting TIDEMARK_ALLOWED_ENDPOINTS",
    )


def url_check(url, *, field: str) -> None:
    """An http(s) URL (an object store's `endpoint_url`) at an allowed endpoint."""
    parsed = url_parse(url, field=field)  # one reading of every URL (urls.py)
    if parsed.scheme not in ("http", "https") or not parsed.host:
        raise InvalidInput(field, "must be an http:// or https:// URL with a host")
    port = parsed.port or DEFAULT_PORTS[parsed.scheme]
    endpoint_check(parsed.scheme, parsed.host, port, field=field)


def dsn_check(dsn: str, *, field: str) -> None:
    """Every host a libpq DSN would connect to is allowed (see the module's docstring)."""
    from psycopg2.extensions import parse_dsn

    try:
        params = parse_dsn(dsn)
    except Exception:
        # never repeat the DSN: it may hold a password
        raise InvalidInput(field, "the variable does not hold a valid PostgreSQL DSN") from None
    if params.get("service"):
        raise InvalidInput(field, "a DSN naming a service is not accepted; give host and port")
    hosts = [host for host in (params.get("host") or "").split(",")]
    addresses = [address for address in (params.get("hostaddr") or "").split(",")]
    if not any(hosts) and not any(addresses):
        raise InvalidInput(field, "the DSN must name its host (host=... or postgresql://host/)")
    ports = [port.strip() for port in str(params.get("port") or "").split(",")]
    count = max(len(hosts), len(addresses))
    for index in range(count):
        host = (hosts[index] if index < len(hosts) else "").strip()
        address = (addresses[index] if index < len(addresses) else "").strip()
        raw_port = ports[index] if index < len(ports) else ports[0]
        try:
            port = int(raw_port) if raw_port else DEFAULT_PORTS["postgresql"]
        except ValueError:
            raise InvalidInput(field, "the DSN has an invalid port") from None
        # libpq connects to hostaddr when given (host is then only a name for TLS/auth)
        target = address or host
        if not target:
            raise InvalidInput(field, "the DSN must name every host it connects to")
        if target.startswith("/"):
            endpoint_check("postgresql", os.path.realpath(target), None, field=field)
        elif target.startswith("@"):
            raise InvalidInput(field, "abstract unix sockets are not accepted")
        else:
            endpoint_check("postgresql", target, port, field=field)


def kafka_check(servers, *, field: str) -> None:
    """Every bootstrap server (`host:port,...`) allowed as `kafka://host:port`."""
    if not isinstance(servers, str) or not servers.strip():
        raise InvalidInput(field, "must be host:port[,host:port...]")
    for server in servers.split(","):
        host, _, port = server.strip().rpartition(":")
        host = host.strip("[]")
        try:
            number = int(port)
        except ValueError:
            raise InvalidInput(field, f"{server.strip()} is not host:port") from None
        endpoint_check("kafka", host, number, field=field)
