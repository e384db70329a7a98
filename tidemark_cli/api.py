"""The API client the command uses: tidemark_client's, plus a polite wait when throttled, paging
with a limit, and each error as one line (the API's field and message)."""

import time
import urllib.error
import urllib.parse

from tidemark_cli.config import UsageError
from tidemark_client import (
    RedirectRefused,
    Throttled,
    Tidemark,
    TidemarkError,
    UnexpectedAnswer,
)

# a throttled call waits as the server asks, a few times, then gives up with the 429
THROTTLE_RETRIES = 3
THROTTLE_MAX_WAIT = 60.0


class Api:
    def __init__(self, url: str, *, token: str | None, timeout: float = 30.0):
        self.url = url
        self.client = Tidemark(url, token=token, timeout=timeout)

    def call(self, method: str, path: str, body: dict | None = None, params: dict | None = None):
        for attempt in range(THROTTLE_RETRIES + 1):
            try:
                return self.client.request(method, path, body, params=params)
            except Throttled as exc:
                if attempt == THROTTLE_RETRIES:
                    raise
                time.sleep(min(exc.retry_after or 1.0, THROTTLE_MAX_WAIT))
            except RedirectRefused as exc:
                raise UsageError(str(exc)) from None
            except urllib.error.URLError as exc:
                raise UsageError(f"cannot reach {self.url}: {exc.reason}") from None
            except (TimeoutError, ConnectionError) as exc:
                raise UsageError(f"cannot reach {self.url}: {exc}") from None
            except UnexpectedAnswer as exc:
                start = " ".join(exc.payload.split())[:80]
                raise UsageError(
                    f"{self.url} did not answer with JSON (HTTP {exc.status}, "
                    f"{exc.content_type}: {start}); is it a Tidemark server?"
                ) from None
        raise AssertionError("unreachable")

    def get(self, path: str, **params):
        clean = {k: v for k, v in params.items() if v is not None and v != []}
        return self.call("GET", path, params=clean or None)

    def post(self, path: str, body: dict | None = None):
        return self.call("POST", path, body if body is not None else {})

    def patch(self, path: str, body: dict):
        return self.call("PATCH", path, body)

    def get_or_none(self, path: str):
        """The object, or None when the API answers 404 (it does not exist)."""
        try:
            return self.get(path)
        except TidemarkError as exc:
            if exc.status == 404:
                return None
            raise

    def listing(self, path: str, *, limit: int | None = None, **params) -> list[dict]:
        """A list endpoint's results, following `next` (page or cursor) up to `limit` rows."""
        rows: list[dict] = []
        page = self.get(path, **params)
        while True:
            if isinstance(page, list):  # an unpaginated list
                rows.extend(page)
                break
            rows.extend(page.get("results", []))
            following = page.get("next")
            if not following or (limit is not None and len(rows) >= limit):
                break
            relative = _relative(following, self.client.base_url)
            page = self.call("GET", relative)
        return rows if limit is None else rows[:limit]


def _relative(url: str, base: str) -> str:
    """`next` is an absolute URL; keep only what follows /api/v1/, so the call goes to the same
    server (and carries the token only there)."""
    parsed, root = urllib.parse.urlsplit(url), urllib.parse.urlsplit(base)
    path = parsed.path
    if path.startswith(root.path):
        path = path[len(root.path) :]
    return path + ("?" + parsed.query if parsed.query else "")


def quote(name: str) -> str:
    return urllib.parse.quote(str(name), safe="")


def error_line(exc: TidemarkError) -> str:
    """One line: the API's field and reason (400), its detail otherwise."""
    payload = exc.payload
    if isinstance(payload, dict):
        if isinstance(payload.get("detail"), str):
            return payload["detail"]
        parts = []
        for field, reasons in payload.items():
            text = "; ".join(map(str, reasons)) if isinstance(reasons, list) else str(reasons)
            parts.append(text if field == "non_field_errors" else f"{field}: {text}")
        if parts:
            return " | ".join(parts)
    if isinstance(payload, list) and payload:
        return "; ".join(map(str, payload))
    if isinstance(payload, str) and payload.strip():
        first = payload.strip().splitlines()[0]
        return f"HTTP {exc.status}: {first[:200]}"
    return f"HTTP {exc.status}"
