"""A small client for Tidemark's REST API, for processing batches outside Tidemark.

Standard library only (urllib), no Django. Typical loop:

    from tidemark_client import Tidemark, Conflict

    tm = Tidemark("https://tidemark.example.com", token="...")
    while (batch := tm.acquire("daily-events", worker="etl-7")) is not None:
        with tm.keep_alive(batch):            # heartbeats in a background thread
            try:
                output = process(batch.items)  # your code
            except Exception as exc:
                tm.fail(batch, error={"type": type(exc).__name__, "message": str(exc)})
                continue
        tm.succeed(batch, result={"rows_out": output.rows})

`succeed` raises `Conflict` when the lease was lost (the batch was taken over): the output of this
attempt must then not be published.

The token is only ever sent to the server given as `base_url`: a redirect to another scheme, host
or port is not followed (`RedirectRefused`, before anything is sent there); a redirect within the
same origin is followed with the token.
"""

import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field

__all__ = [
    "AcquiredBatch",
    "Conflict",
    "Forbidden",
    "InvalidRequest",
    "NotFound",
    "RedirectRefused",
    "Throttled",
    "Tidemark",
    "TidemarkError",
    "UnexpectedAnswer",
]


class TidemarkError(Exception):
    """An error answer from the API: `status` and the decoded body in `payload`."""

    def __init__(self, status: int, payload):
        self.status = status
        self.payload = payload
        super().__init__(f"HTTP {status}: {payload}")


class InvalidRequest(TidemarkError):
    """400: `payload` maps each bad field to its reasons."""


class Forbidden(TidemarkError):
    """401 / 403: not logged in, or the role does not allow it."""


class NotFound(TidemarkError):
    """404: unknown job name or batch id."""


class Conflict(TidemarkError):
    """409: the object's state does not allow it (e.g. the lease was lost)."""


class Throttled(TidemarkError):
    """429: over the token's request rate; `retry_after` is the wait in seconds the server asked
    for (None if it named none)."""

    retry_after: float | None = None


class UnexpectedAnswer(TidemarkError):
    """A success status whose body is not JSON: the URL leads to something else than Tidemark's
    API (a login wall, a proxy's page, another service). `payload` is the body's start, as text;
    `content_type` what the server said it is."""

    def __init__(self, status: int, payload: str, content_type: str):
        self.content_type = content_type
        super().__init__(status, payload)


class RedirectRefused(Exception):
    """The server answered a call with a redirect to another origin (scheme, host or port). It is
    not followed: urllib would send the `Authorization` header along to whatever server the
    redirect names. `location` is where it pointed."""

    def __init__(self, url: str, location: str):
        self.url = url
        self.location = location
        super().__init__(
            f"{_origin_text(url)} redirected to another server ({_origin_text(location)}); "
            f"not followed, the token is only sent to {_origin_text(url)}: use the server's "
            "own URL"
        )


_DEFAULT_PORTS = {"http": 80, "https": 443}


def _origin(url: str) -> tuple[str, str, int | None] | None:
    """(scheme, host, port) as urllib connects to them; None when the URL cannot be read."""
    try:
        parts = urllib.parse.urlsplit(url)
        scheme = parts.scheme.lower()
        return scheme, (parts.hostname or "").lower(), parts.port or _DEFAULT_PORTS.get(scheme)
    except ValueError:  # a bad port, a host that changes under NFKC normalisation
        return None


def _origin_text(url: str) -> str:
    origin = _origin(url)
    if origin is None:
        return repr(url[:100])
    scheme, host, port = origin
    return f"{scheme}://{host}" + (
        f":{port}" if port not in (None, _DEFAULT_PORTS.get(scheme)) else ""
    )


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """urllib's redirects, but only within the origin of the call (urllib itself copies every
    header, the token's too, onto a redirect to any host)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        origin = _origin(req.full_url)
        if origin is None or _origin(newurl) != origin:
            fp.close()
            raise RedirectRefused(req.full_url, newurl)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_opener = urllib.request.build_opener(_SameOriginRedirects)


_ERRORS = {
    400: InvalidRequest,
    401: Forbidden,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    429: Throttled,
}


@dataclass
class AcquiredBatch:
    """A batch taken for processing. `attempt` is the fencing token every report must carry."""

    id: int
    job: str
    attempt: int
    range_start: int
    range_end: int
    item_count: int
    weight: int
    lease_expires_at: str
    items: list[dict] = field(default_factory=list)
    raw: dict = field(default_factory=dict, repr=False)
    # the lease asked for at acquire (None: the job's); heartbeats ask for it again
    lease_seconds: int | None = None

    @classmethod
    def from_json(cls, data: dict) -> "AcquiredBatch":
        return cls(
            id=data["id"],
            job=data["job"],
            attempt=data["attempt"],
            range_start=data["range_start"],
            range_end=data["range_end"],
            item_count=data["item_count"],
            weight=data["weight"],
            lease_expires_at=data["lease_expires_at"],
            items=data.get("items", []),
            raw=data,
        )

    @property
    def locations(self) -> list[str]:
        return [item["item"] for item in self.items]


class Tidemark:
    """`token` may be None only for `auth/token/`, the one call that needs no token."""

    def __init__(self, base_url: str, *, token: str | None, timeout: float = 30.0):
        self.base_url = base_url.rstrip("/") + "/api/v1/"
        self.token = token
        self.timeout = timeout

    # ---- plumbing ----

    def request(self, method: str, path: str, body: dict | None = None, params=None):
        """One API call; returns the decoded JSON (None for 204) or raises a TidemarkError."""
        url = urllib.parse.urljoin(self.base_url, path.lstrip("/"))
        if params:
            url += "?" + urllib.parse.urlencode(params, doseq=True)
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        if self.token is not None:
            req.add_header("Authorization", f"Token {self.token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with _opener.open(req, timeout=self.timeout) as response:
                raw = response.read()
                try:
                    return json.loads(raw) if raw else None
                except ValueError:
                    raise UnexpectedAnswer(
                        response.status,
                        raw[:200].decode(errors="replace"),
                        response.headers.get("Content-Type") or "no content type",
                    ) from None
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                payload = json.loads(raw) if raw else None
            except ValueError:
                payload = raw.decode(errors="replace")
            error = _ERRORS.get(exc.code, TidemarkError)(exc.code, payload)
            if isinstance(error, Throttled):
                try:
                    error.retry_after = float(exc.headers.get("Retry-After"))
                except (TypeError, ValueError):
                    error.retry_after = None
            raise error from None

    def get(self, path: str, **params):
        return self.request("GET", path, params=params or None)

    def post(self, path: str, body: dict | None = None):
        return self.request("POST", path, body if body is not None else {})

    # ---- external processing ----

    def acquire(
        self, job: str, *, worker: str, lease_seconds: int | None = None
    ) -> AcquiredBatch | None:
        """Take the job's next batch (None when nothing is waiting)."""
        body = {"worker": worker}
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
        data = self.post(f"jobs/{_quote(job)}/acquire/", body)
        if data is None:
            return None
        batch = AcquiredBatch.from_json(data)
        batch.lease_seconds = lease_seconds
        return batch

    def acquire_batches(
        self, job: str, *, worker: str, count: int, lease_seconds: int | None = None
    ) -> list[AcquiredBatch]:
        """Take up to `count` of the job's batches in one call (empty when nothing is waiting);
        each is the batch `acquire` would have given next."""
        body = {"worker": worker, "count": count}
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
        data = self.post(f"jobs/{_quote(job)}/acquire-batches/", body)
        batches = [AcquiredBatch.from_json(item) for item in data["batches"]]
        for batch in batches:
            batch.lease_seconds = lease_seconds
        return batches

    def succeed_batches(
        self,
        batches: list[AcquiredBatch],
        *,
        results: dict[int, dict] | None = None,
        watermark_values: dict[int, object] | None = None,
    ) -> dict:
        """Commit several batches of one job in one call; `results`: batch id -> its result,
        `watermark_values`: batch id -> the value it reached (for `datetime`, `key_value` and
        `file_set` watermarks, as `succeed`'s `watermark_value`). Returns {"committed": [batch,
        ...], "refused": [{"id", "reason"}, ...]}: a batch whose lease was lost is refused and
        the others commit."""
        if not batches:
            return {"committed": [], "refused": []}
        jobs = {batch.job for batch in batches}
        if len(jobs) != 1:
            raise ValueError("succeed_batches commits batches of one job at a time")
        results, values = results or {}, watermark_values or {}
        unknown = sorted(set(values) - {b.id for b in batches})
        if unknown:
            raise ValueError(f"watermark_values names batches not committed here: {unknown}")
        commits = []
        for b in batches:
            commit = {"id": b.id, "attempt": b.attempt, "result": results.get(b.id, {})}
            if values.get(b.id) is not None:
                commit["watermark_value"] = values[b.id]
            commits.append(commit)
        return self.post(f"jobs/{_quote(jobs.pop())}/succeed-batches/", {"batches": commits})

    def heartbeat(self, batch: AcquiredBatch, *, lease_seconds: int | None = None) -> str:
        """Extend the lease (by `lease_seconds`, else by the lease the batch was acquired with,
        else by the job's); returns the new expiry. Raises Conflict when the lease is lost."""
        body = {"attempt": batch.attempt}
        lease_seconds = lease_seconds if lease_seconds is not None else batch.lease_seconds
        if lease_seconds is not None:
            body["lease_seconds"] = lease_seconds
        data = self.post(f"batches/{batch.id}/heartbeat/", body)
        batch.lease_expires_at = data["lease_expires_at"]
        return batch.lease_expires_at

    def succeed(self, batch: AcquiredBatch, *, result: dict | None = None, watermark_value=None):
        """Commit the batch (its output is written). Raises Conflict when the lease was lost."""
        body = {"attempt": batch.attempt, "result": result or {}}
        if watermark_value is not None:
            body["watermark_value"] = watermark_value
        return self.post(f"batches/{batch.id}/succeed/", body)

    def fail(self, batch: AcquiredBatch, *, error: dict):
        """Report a failed attempt; Tidemark retries it after a backoff, or marks it dead."""
        return self.post(f"batches/{batch.id}/fail/", {"attempt": batch.attempt, "error": error})

    @contextmanager
    def keep_alive(self, batch: AcquiredBatch, *, every: float | None = None):
        """Heartbeat in a background thread while the block runs.

        Yields a threading.Event that is set if the lease is lost; the block may check it to stop
        early. Beat every `every` seconds (default 10; keep it well under the lease).
        """
        lost = threading.Event()
        stop = threading.Event()
        interval = every or 10.0

        def beat():
            while not stop.wait(interval):
                try:
                    self.heartbeat(batch)
                except (Conflict, NotFound):
                    lost.set()
                    return
                except (TidemarkError, OSError):
                    continue  # a hiccup: the next beat may get through before the lease ends

        thread = threading.Thread(target=beat, name=f"tidemark-heartbeat-{batch.id}", daemon=True)
        thread.start()
        try:
            yield lost
        finally:
            stop.set()
            thread.join(timeout=interval + self.timeout)

    # ---- reads and operations ----

    def job(self, name: str) -> dict:
        return self.get(f"jobs/{_quote(name)}/")

    def watermark(self, job: str) -> dict:
        return self.get(f"jobs/{_quote(job)}/watermark/")

    def run(self, job: str) -> dict:
        return self.post(f"jobs/{_quote(job)}/run/")

    def discover(self, connector: str) -> int:
        """Ask a files connector to scan its directory now; returns how many files are new."""
        return self.post(f"connectors/{_quote(connector)}/discover/")["registered"]

    def register_assets(self, connector: str, assets: list[dict]) -> dict:
        """Announce complete files ([{location, weight, extra}], in the order they became
        complete). Known locations keep their id. Returns {registered, known, assets: [{location,
        id}]}."""
        return self.post(f"connectors/{_quote(connector)}/assets/", {"assets": assets})

    def batches(self, **filters) -> list[dict]:
        """All batches matching the filters (job=, status=, kind=, ...), following the pages."""
        found, path, params = [], "batches/", filters
        while path:
            page = self.request("GET", path, params=params)
            found.extend(page["results"])
            path, params = page.get("next"), None
        return found


def _quote(name: str) -> str:
    return urllib.parse.quote(name, safe="")
