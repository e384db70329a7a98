"""Where the command finds its server and token.

The server: `--url`, else `TIDEMARK_URL`, else the one `tidemark login` used last. The token:
`TIDEMARK_TOKEN`, else the one `tidemark login` stored for that same server (a token is only ever
sent to the server it came from). Tokens live in `$XDG_CONFIG_HOME/tidemark/config.json`
(default `~/.config/tidemark/config.json`), readable by the user only (mode 0600).
"""

import json
import os
import tempfile
from pathlib import Path


class UsageError(Exception):
    """Something the user must give or fix; printed as one line."""


def config_path() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "tidemark" / "config.json"


def normalize_url(url: str) -> str:
    url = url.strip().rstrip("/")
    if not url.startswith(("http://", "https://")):
        raise UsageError(f"the server URL must start with http:// or https://, got {url!r}")
    return url


def read_config() -> dict:
    path = config_path()
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {path}: {exc}") from None
    return data if isinstance(data, dict) else {}


def _broken(what: str) -> UsageError:
    return UsageError(
        f"{config_path()}: {what}; fix the file, or delete it and run `tidemark login` again"
    )


def _servers(data: dict) -> dict:
    """The stored logins, {url: {"token", "username"}}, as `tidemark login` writes them."""
    servers = data.get("servers", {})
    if not isinstance(servers, dict) or not all(isinstance(v, dict) for v in servers.values()):
        raise _broken('"servers" is not an object of {url: {"token", "username"}}')
    return servers


def write_config(data: dict) -> Path:
    """Replace the config file atomically; the file is created with mode 0600 (and its folder
    0700) so the token is never readable by others, not even for a moment."""
    path = config_path()
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".config-", suffix=".json")
    try:
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump(data, out, indent=2, sort_keys=True)
            out.write("\n")
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def store_login(url: str, *, token: str, username: str) -> Path:
    data = read_config()
    servers = data.get("servers") if isinstance(data.get("servers"), dict) else {}
    servers[url] = {"token": token, "username": username}
    return write_config({**data, "servers": servers, "default_url": url})


def forget_login(url: str) -> bool:
    data = read_config()
    servers = data.get("servers") if isinstance(data.get("servers"), dict) else {}
    if servers.pop(url, None) is None:
        return False
    if data.get("default_url") == url:
        data.pop("default_url")
    write_config({**data, "servers": servers})
    return True


def resolve_url(given: str | None) -> str:
    url = given or os.environ.get("TIDEMARK_URL")
    if not url:
        url = read_config().get("default_url")
        if url is not None and not isinstance(url, str):
            raise _broken('"default_url" is not a URL')
    if not url:
        raise UsageError("no server: give --url, set TIDEMARK_URL, or run `tidemark login`")
    return normalize_url(url)


def checked_token(token: str, source: str) -> str:
    """A token as given, without the whitespace around it (a trailing newline or CR of a file it
    was read from); whitespace or a control character inside is no token, and would not even
    fit in an HTTP header."""
    token = token.strip()
    if any(c.isspace() or not c.isprintable() for c in token):
        raise UsageError(f"{source} holds whitespace or control characters")
    return token


def resolve_token(url: str) -> str:
    token = os.environ.get("TIDEMARK_TOKEN")
    if token and token.strip():
        return checked_token(token, "TIDEMARK_TOKEN")
    server = _servers(read_config()).get(url) or {}
    if not server.get("token"):
        raise UsageError(f"not logged in to {url}: run `tidemark login` or set TIDEMARK_TOKEN")
    return checked_token(str(server["token"]), f"the token stored for {url} in {config_path()}")
