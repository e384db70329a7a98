"""One rule for secrets: refused on the way in, masked on the way out, redacted from stored errors.

A config (connector config, job params, job sink) never holds a secret. A secret lives in an
environment variable of the processes that need it, and the config names that variable under a
key ending in `_env` (`dsn_env`, `password_env`). What counts as a secret:

- a key that looks like one (`password`, `api_key`, `Secret_Token`, ...), at any depth;
- a string holding a credential in any of the usual spellings: a URL with a password
  (`postgres://app:pw@db/app`), a libpq key/value DSN (`host=db password=pw`), a JDBC URL or
  query string (`jdbc:postgresql://db/app?user=app&password=pw`, `...;password=pw`).

`check_no_secrets` refuses them naming the field; `mask` hides them in anything shown (API, pages,
admin); `redact` removes the values of every configured credential (and of the variables a job
refers to) from text that is stored or shown (errors reported by workers and external processors).

Which variables may be named at all is the deployment's decision, made here and nowhere else:
only those listed in the setting `TIDEMARK_CREDENTIALS`, and never one of Tidemark's own
(`credential_name_check`). It runs when a config is saved (`check_no_secrets`) and again where a
value is read (`credential_value`, and `env_names_check` on a batch's spec), so a config stored
before a variable was withdrawn cannot read it either.
"""

import os
import re

from django.conf import settings

from inventory.services.errors import InvalidInput

# Tidemark's own configuration: never a credential a user may name, whatever the setting lists.
OWN_NAMES = frozenset({"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "METRICS_TOKEN"})
OWN_PREFIXES = ("TIDEMARK_", "DJANGO_", "CELERY_")

MASK = "********"

# Key fragments that mark a secret; `<key>_env` (the variable's name) is what to use instead.
SECRET_HINTS = (
    "password",
    "passwd",
    "pwd",
    "secret",
    "token",
    "api_key",
    "apikey",
    "access_key",
    "private_key",
    "credential",
    "authorization",
    "jaas",
)
_HINTS = "|".join(re.escape(hint) for hint in SECRET_HINTS)

# scheme://user:password@host
_URL_PASSWORD = re.compile(r"(?P<head>://[^/@\s:]*:)(?P<secret>[^/@\s]+)(?=@)")
# password=... in a key/value DSN (`host=db password='x y'`), a query string (`?password=x&`) or a
# JDBC property list (`;password=x`); the key may carry a prefix (`sslpassword`, `db.password`).
_ASSIGNED_SECRET = re.compile(
    rf"(?P<head>(?:^|[\s;?&,])[\w.-]*(?:{_HINTS})[\w.-]*(?<!_env)\s*=\s*)"
    r"(?P<secret>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"|[^\s;&,]+)",
    re.IGNORECASE,
)


def is_secret_key(key) -> bool:
    lowered = str(key).lower()
    return any(hint in lowered for hint in SECRET_HINTS) and not lowered.endswith("_env")


def secret_in_text(text: str) -> str | None:
    """Why `text` holds a credential, or None."""
    if _URL_PASSWORD.search(text):
        return "this URL contains a password"
    match = _ASSIGNED_SECRET.search(text)
    if match:
        key = match.group("head").strip(" \t\n;?&,=")
        return f"this value sets {key.strip()}"
    return None


# levels of objects and arrays a config (or any API body) may nest: Python walks them
# recursively (this check, masking on the way out), and a config of a few hundred levels, once
# stored, made every read of its job a 500; real configs hold a handful
MAX_JSON_DEPTH = 64


def check_no_secrets(value, path: str, _depth: int = 0) -> None:
    """Refuse secrets anywhere in a config, nested objects and lists included (InvalidInput
    naming the field; the message never repeats the secret), and a config nested deeper than
    MAX_JSON_DEPTH."""
    if isinstance(value, dict | list) and _depth >= MAX_JSON_DEPTH:
        raise InvalidInput(
            path, f"is nested deeper than {MAX_JSON_DEPTH} levels of objects and arrays"
        )
    if isinstance(value, dict):
        for key, inner in value.items():
            field = f"{path}.{key}"
            if "\x00" in str(key):
                raise InvalidInput(path, "keys must not contain NUL characters")
            if is_secret_key(key):
                raise InvalidInput(
                    field,
                    f"secrets are not stored; put it in an environment variable and set {key}_env "
                    "to that variable's name",
                )
            if str(key).lower().endswith("_env"):
                if not (isinstance(inner, str) and inner.isidentifier()):
                    raise InvalidInput(field, "must be the name of an environment variable")
                credential_name_check(inner, field=field)
            check_no_secrets(inner, field, _depth + 1)
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            check_no_secrets(inner, f"{path}[{index}]", _depth + 1)
    elif isinstance(value, str):
        if "\x00" in value:
            # valid JSON, but neither jsonb nor text can hold it
            raise InvalidInput(path, "must not contain NUL characters")
        reason = secret_in_text(value)
        if reason:
            raise InvalidInput(
                path,
                f"{reason}; secrets are not stored: put the whole value (or the password) in an "
                "environment variable and name it in a key ending in _env",
            )


def _is_own(name: str) -> bool:
    own = OWN_NAMES | getattr(settings, "TIDEMARK_OWN_ENV_NAMES", frozenset())
    return name in own or name.upper().startswith(OWN_PREFIXES)


def _listed(name: str) -> bool:
    for entry in settings.TIDEMARK_CREDENTIALS:
        if entry == name or (entry.endswith("*") and name.startswith(entry[:-1])):
            return True
    return False


def credential_name_check(name, *, field: str) -> None:
    """Refuse a variable the deployment does not offer as a credential (InvalidInput naming the
    field and the setting that allows it; Tidemark's own settings are never allowed)."""
    if not isinstance(name, str) or not name.isidentifier():
        raise InvalidInput(field, "must be the name of an environment variable")
    if _is_own(name):
        raise InvalidInput(
            field,
            f"{name} is part of Tidemark's own configuration and can never be named as a "
            "credential; put the credential in a variable of its own and list it in "
            "TIDEMARK_CREDENTIALS",
        )
    if not _listed(name):
        raise InvalidInput(
            field,
            f"environment variable {name} is not an allowed credential; an administrator allows "
            "it by listing it in the setting TIDEMARK_CREDENTIALS",
        )


def credential_value(name, *, field: str) -> str | None:
    """The value of an allowed credential variable (None when unset); InvalidInput otherwise."""
    credential_name_check(name, field=field)
    return os.environ.get(name)


def env_names_check(value, path: str) -> None:
    """Every `*_env` name at any depth of `value` checked by `credential_name_check` (a batch's
    spec before it runs: its configs may predate the deployment's current list)."""
    if isinstance(value, dict):
        for key, inner in value.items():
            field = f"{path}.{key}"
            if str(key).lower().endswith("_env"):
                credential_name_check(inner, field=field)
            else:
                env_names_check(inner, field)
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            env_names_check(inner, f"{path}[{index}]")


def configured_credentials() -> set[str]:
    """The allowed credential variables set in this process (exact names and `PREFIX*` matches),
    Tidemark's own excluded: what redaction removes from every stored or shown text."""
    names = set()
    for entry in settings.TIDEMARK_CREDENTIALS:
        if entry.endswith("*"):
            names.update(name for name in os.environ if name.startswith(entry[:-1]))
        elif entry in os.environ:
            names.add(entry)
    return {name for name in names if not _is_own(name)}


def mask(value, _depth: int = 0):
    """A copy with every secret-looking key's value and every credential in a string masked.
    What lies deeper than MAX_JSON_DEPTH (a config stored before that bound) is masked whole:
    walking it could exhaust Python's recursion limit, and it cannot be checked."""
    if isinstance(value, dict | list) and _depth >= MAX_JSON_DEPTH:
        return MASK
    if isinstance(value, dict):
        return {
            key: (MASK if is_secret_key(key) else mask(inner, _depth + 1))
            for key, inner in value.items()
        }
    if isinstance(value, list):
        return [mask(inner, _depth + 1) for inner in value]
    if isinstance(value, str):
        return mask_text(value)
    return value


def mask_text(text: str) -> str:
    text = _URL_PASSWORD.sub(lambda m: m.group("head") + MASK, text)
    return _ASSIGNED_SECRET.sub(lambda m: m.group("head") + MASK, text)


def env_names(*configs) -> set[str]:
    """The environment variables the configs refer to (values of `*_env` keys, at any depth)."""
    names: set[str] = set()

    def walk(value):
        if isinstance(value, dict):
            for key, inner in value.items():
                if str(key).lower().endswith("_env") and isinstance(inner, str):
                    names.add(inner)
                walk(inner)
        elif isinstance(value, list):
            for inner in value:
                walk(inner)

    for config in configs:
        walk(config)
    return names


def redact(value, *, names: set[str] = frozenset()):
    """`value` (a JSON-like error) with the values of the named environment variables and of
    every configured credential (TIDEMARK_CREDENTIALS), and any credential they contain, replaced
    by the mask, secret-looking keys masked too: what a worker or an external processor reports
    is stored and shown, so a DSN echoed in an exception must not be."""
    return mask(scrub(value, names=names))


def scrub(value, *, names: set[str] = frozenset()):
    """`value` with every configured credential's value (and the named variables' values, and any
    credential in a string) replaced by the mask, in keys as in values: a result's or an error's
    keys are stored and shown as its values are. The credentials' values are read from the
    environment at the first string met, key or value: a value holding no text at all (numbers,
    lists of them) costs no walk of the environment."""
    secrets = None

    def values() -> list[str]:
        found = []
        for name in set(names) | configured_credentials():
            secret = os.environ.get(name)
            if secret and len(secret) >= 4:
                found.append(secret)
                found.extend(_credentials_in(secret))
        return sorted(found, key=len, reverse=True)

    def text(inner: str) -> str:
        nonlocal secrets
        if secrets is None:
            secrets = values()
        for secret in secrets:
            inner = inner.replace(secret, MASK)
        return mask_text(inner)

    def walk(inner):
        if isinstance(inner, dict):
            return {
                (text(key) if isinstance(key, str) else key): walk(item)
                for key, item in inner.items()
            }
        if isinstance(inner, list):
            return [walk(item) for item in inner]
        if isinstance(inner, str):
            return text(inner)
        return inner

    return walk(value)


class RedactingFilter:
    """A logging filter (settings.LOGGING) that removes configured credentials from log lines."""

    def filter(self, record) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string is logging's own problem to report
            return True
        cleaned = scrub(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        return True


def _credentials_in(text: str) -> list[str]:
    found = [m.group("secret") for m in _URL_PASSWORD.finditer(text)]
    for match in _ASSIGNED_SECRET.finditer(text):
        secret = match.group("secret")
        found.append(secret)
        if secret[:1] in "'\"":
            found.append(secret[1:-1])
    return [secret for secret in found if len(secret) >= 4]
