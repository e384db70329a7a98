"""Errors of the Spark side and the useful part of a Spark/Py4J error.

A Spark failure arrives as a Python exception whose text holds the whole JVM stack trace, often
hundreds of lines where two matter: the error class and the root cause. `spark_error_detail`
keeps those lines so a stored batch error can be read by a person.
"""

import re


class ReadError(Exception):
    """The batch's input cannot be read (missing, malformed, unknown format)."""


# "sink 'mode' must be ...": the key a sink check names first
_SINK_KEY = re.compile(r"sink '(\w+)'")


class SinkError(Exception):
    """The batch's output cannot be written (bad sink config, unknown columns, database error).

    `field`: the sink key the error is about, for a 400 naming `sink.<key>` when a job is saved;
    set where it is raised, else read from a message that starts "sink '<key>'" (the form every
    sink check uses), else None."""

    _field: str | None = None

    @property
    def field(self) -> str | None:
        if self._field is not None:
            return self._field
        named = _SINK_KEY.match(str(self))
        return named.group(1) if named else None

    @field.setter
    def field(self, value: str | None) -> None:
        self._field = value


class BatchError(Exception):
    """A batch failed. `as_dict()` is what the control plane stores: type, message, detail."""

    def __init__(self, type: str, message: str, detail: str = "", stage: str = ""):
        self.type = type
        self.message = message
        self.detail = detail
        self.stage = stage
        super().__init__(message)

    def as_dict(self) -> dict:
        return {
            "type": self.type,
            "message": self.message,
            "detail": self.detail,
            "stage": self.stage,
        }

    def __reduce__(self):
        return (type(self), (self.type, self.message, self.detail, self.stage))


_STACK_LINE = re.compile(r"^\s*(at |\.\.\. \d+ more|Suppressed: |\{\")")
_ERROR_CLASS = re.compile(r"(\[[A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*\] .*)")
_SQLSTATE = re.compile(r"\s*SQLSTATE: \w+;?")
_MAX_DETAIL_LINES = 15
_MAX_DETAIL_CHARS = 4000


def error_text(exc: BaseException) -> str:
    """The full text of an exception, including the Java cause chain when PySpark has it."""
    text = str(exc)
    stack = getattr(exc, "_stackTrace", None)  # pyspark CapturedException: Java causes live here
    if isinstance(stack, str) and stack:
        text = f"{text}\n{stack}"
    return text


def spark_error_detail(exc: BaseException) -> str:
    """The first lines of each exception in the chain, without JVM stack frames or repeats."""
    kept: list[str] = []
    seen: set[str] = set()
    for raw in error_text(exc).splitlines():
        line = raw.rstrip()
        # indented lines are stack frames: Java's "\tat ...", Python's "  File ..." and its code
        if not line.strip() or line[0].isspace() or _STACK_LINE.match(line):
            continue
        line = line.lstrip(": ").strip() if line.startswith(":") else line
        if line in seen:
            continue
        seen.add(line)
        kept.append(line)
        if len(kept) >= _MAX_DETAIL_LINES:
            break
    return "\n".join(kept)[:_MAX_DETAIL_CHARS]


def spark_error_summary(exc: BaseException) -> str:
    """One line saying what went wrong: Spark's error-class line plus the root cause.

    For an error raised in a Python worker, the last line of its traceback.
    """
    text = error_text(exc)
    python_error = _python_error_line(text)
    if python_error:
        return python_error
    lines = text.splitlines()
    classed = [m.group(1) for line in lines if (m := _ERROR_CLASS.search(line))]
    causes = [line.split("Caused by:", 1)[1].strip() for line in lines if "Caused by:" in line]
    head = _SQLSTATE.sub("", classed[-1]).strip().rstrip(";").strip() if classed else ""
    root = causes[-1] if causes else ""
    if head and root and root not in head:
        return f"{head} (cause: {root})"
    if head or root:
        return head or root
    for line in lines:
        stripped = line.strip().lstrip(": ")
        if stripped and not stripped.startswith("An error occurred while calling"):
            return stripped
    return type(exc).__name__


def _python_error_line(text: str) -> str:
    """The `Type: message` line closing the last Python traceback in `text`, if any."""
    marker = "Traceback (most recent call last)"
    if marker not in text:
        return ""
    found = ""
    for line in text.split(marker)[-1].splitlines()[1:]:
        if _STACK_LINE.match(line) or line.startswith("\t"):
            break  # the Java frames that carried the Python error begin
        if not line.strip():
            continue
        if line[0].isspace():
            found = ""  # a frame: the error line is the first one after the last frame
        elif not found:
            found = line.strip()
    return found


def spark_error_type(exc: BaseException) -> str:
    """The exception's class name; for a raw Py4J error, the Java class it wraps."""
    java = getattr(exc, "java_exception", None)
    if java is not None:
        try:
            return str(java.getClass().getSimpleName())
        except Exception:  # the JVM may be gone; the Python name still says something
            pass
    return type(exc).__name__


# Spark's error classes for input it cannot read. Spark reads lazily, so these surface in the
# write (the first action), wrapped in the sink's error; they are still the input's fault.
_INPUT_FAILURE = re.compile(
    r"\[(FAILED_READ_FILE|MALFORMED_RECORD_IN_PARSING|CANNOT_READ_FILE_FOOTER|"
    r"PARQUET_COLUMN_DATA_TYPE_MISMATCH)[\].]"
)


def _root_spark_error(exc: BaseException) -> BaseException:
    """The exception Spark raised, under the sink's own wrapper (`raise SinkError(...) from exc`)."""
    return exc.__cause__ if exc.__cause__ is not None else exc


def input_failed(exc: BaseException) -> bool:
    """Whether a failed write failed because the batch's input could not be read."""
    text = f"{exc}\n{getattr(exc, 'detail', '') or ''}\n{error_text(_root_spark_error(exc))}"
    return _INPUT_FAILURE.search(text) is not None


_EXECUTOR_READ_ERROR = re.compile(r"^workers\.spark\.errors\.ReadError: (.+)$", re.MULTILINE)


def executor_read_error(exc: BaseException) -> ReadError | None:
    """The ReadError that a reader raised on an executor (a Python data source's partition),
    carried back inside Spark's error; None if the failure was something else."""
    root = _root_spark_error(exc)
    # a sink that kept only Spark's text (the postgres sink scrubs its DSN out of it) holds the
    # executor's lines in its `detail`
    kept = getattr(exc, "detail", "") or ""
    found = _EXECUTOR_READ_ERROR.findall(f"{error_text(root)}\n{kept}")
    if not found:
        return None
    error = ReadError(found[-1].strip())
    error.detail = kept if root is exc and kept else spark_error_detail(root)
    return error


def input_failure_summary(exc: BaseException) -> str:
    root = _root_spark_error(exc)
    if root is exc:
        # the sink kept only Spark's text (e.g. it scrubbed a DSN out of it): its message says it
        return str(exc).split(": ", 1)[-1]
    return spark_error_summary(root)


def input_failure_detail(exc: BaseException) -> str:
    root = _root_spark_error(exc)
    if root is exc:
        return getattr(exc, "detail", "") or ""
    return spark_error_detail(root)


def scrub_dsn(error, dsn: str) -> str:
    """An error's text with the DSN and its password removed."""
    text = str(getattr(error, "pgerror", None) or error).strip()
    secrets = [dsn]
    try:
        from psycopg2.extensions import parse_dsn

        password = parse_dsn(dsn).get("password")
        if password:
            secrets.append(password)
    except Exception:  # an unparseable DSN is scrubbed as a whole above
        pass
    for secret in secrets:
        text = text.replace(secret, "***")
    return text
