"""Typed environment variables that fail loudly on bad values (healthchecks-style)."""

import os


class ConfigError(RuntimeError):
    """A setting in the environment has a value Tidemark cannot use."""


# Every variable the settings read (and its `_FILE` form): Tidemark's own configuration, which no
# connector or job may name as a credential (inventory/services/secrets.py).
READ_NAMES: set[str] = set()


def env_str(name: str, default: str | None = None) -> str | None:
    """A string from NAME, or from the file named by NAME_FILE (for secrets)."""
    READ_NAMES.update((name, f"{name}_FILE"))
    file_name = os.environ.get(f"{name}_FILE")
    if file_name:
        try:
            with open(file_name, encoding="utf-8") as fh:
                return fh.read().strip()
        except OSError as exc:
            raise ConfigError(
                f"{name}_FILE={file_name!r}: cannot read it ({exc.strerror})"
            ) from exc
    value = os.environ.get(name)
    return default if value in (None, "") else value


def env_bool(name: str, default: bool) -> bool:
    READ_NAMES.update((name, f"{name}_FILE"))
    value = os.environ.get(name)
    if value in (None, ""):
        return default
    lowered = value.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{name}={value!r}: expected one of true/false/1/0/yes/no/on/off")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    READ_NAMES.update((name, f"{name}_FILE"))
    value = os.environ.get(name)
    if value in (None, ""):
        return default
    try:
        number = int(value)
    except ValueError:
        raise ConfigError(f"{name}={value!r}: expected an integer") from None
    if minimum is not None and number < minimum:
        raise ConfigError(f"{name}={value!r}: must be at least {minimum}")
    return number


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    """One of `choices` (compared lower-case), the default when unset."""
    value = env_str(name, default)
    lowered = value.strip().lower()
    if lowered not in choices:
        raise ConfigError(f"{name}={value!r}: expected one of {', '.join(choices)}")
    return lowered


def env_list(name: str, default: list[str]) -> list[str]:
    READ_NAMES.update((name, f"{name}_FILE"))
    value = os.environ.get(name)
    if value in (None, ""):
        return default
    return [item.strip() for item in value.split(",") if item.strip()]
