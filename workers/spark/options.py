"""The reader and writer options a job may give Spark: one allowlist per format, no Django here.

Spark copies every DataSource option into the Hadoop configuration of the read or write
(`fs.defaultFS`, `fs.<scheme>.impl`, `mapreduce.*`, `parquet.*` ...), and it reads its own keys
(`path`, `spark.*`) case-insensitively. So an option a job gives is never passed on as written: its
name must equal, ignoring ASCII case, one of the names below for its format, and Spark receives
that name as spelled here and the value as text. Anything else (another namespace, a variant in
case, a space, a non-ASCII look-alike, a codec's class name as a value) is an OptionError naming
the key. The control plane checks a connector's `read_options` and a files sink's `options` with
this when they are saved, and the workers again on every batch (`normalized_reader_options`,
`normalized_writer_options`), the CLI's local runner included.
"""

# Spark's documented data source options that only shape how rows are parsed or written
_CSV_COMMON = (
    "sep",
    "delimiter",
    "encoding",
    "charset",
    "quote",
    "escape",
    "header",
    "ignoreLeadingWhiteSpace",
    "ignoreTrailingWhiteSpace",
    "nullValue",
    "emptyValue",
    "dateFormat",
    "timestampFormat",
    "timestampNTZFormat",
    "charToEscapeQuoteEscaping",
    "lineSep",
    "timeZone",
)
_JSON_COMMON = (
    "encoding",
    "dateFormat",
    "timestampFormat",
    "timestampNTZFormat",
    "lineSep",
    "timeZone",
)

READER_OPTIONS: dict[str, tuple[str, ...]] = {
    "parquet": ("mergeSchema", "datetimeRebaseMode", "int96RebaseMode"),
    "json": _JSON_COMMON
    + (
        "mode",
        "columnNameOfCorruptRecord",
        "multiLine",
        "primitivesAsString",
        "prefersDecimal",
        "allowComments",
        "allowUnquotedFieldNames",
        "allowSingleQuotes",
        "allowNumericLeadingZeros",
        "allowBackslashEscapingAnyCharacter",
        "allowUnquotedControlChars",
        "allowNonNumericNumbers",
        "enableDateTimeParsingFallback",
        "samplingRatio",
        "dropFieldIfAllNull",
        "locale",
    ),
    "csv": _CSV_COMMON
    + (
        "mode",
        "columnNameOfCorruptRecord",
        "multiLine",
        "comment",
        "inferSchema",
        "preferDate",
        "enforceSchema",
        "nanValue",
        "positiveInf",
        "negativeInf",
        "maxColumns",
        "maxCharsPerColumn",
        "samplingRatio",
        "locale",
        "unescapedQuoteHandling",
        "enableDateTimeParsingFallback",
    ),
}

WRITER_OPTIONS: dict[str, tuple[str, ...]] = {
    "parquet": ("compression",),
    "orc": ("compression",),
    "json": _JSON_COMMON + ("compression", "ignoreNullFields"),
    "csv": _CSV_COMMON + ("compression", "quoteAll", "escapeQuotes"),
}

# options whose value Spark would also take as a class name or a mode it does not check: the
# value must be one of these (any case)
_REBASE = ("EXCEPTION", "CORRECTED", "LEGACY")
_READER_VALUES: dict[str, tuple[str, ...]] = {
    "mode": ("PERMISSIVE", "DROPMALFORMED", "FAILFAST"),
    "datetimeRebaseMode": _REBASE,
    "int96RebaseMode": _REBASE,
    "unescapedQuoteHandling": (
        "STOP_AT_CLOSING_QUOTE",
        "BACK_TO_DELIMITER",
        "STOP_AT_DELIMITER",
        "SKIP_VALUE",
        "RAISE_ERROR",
    ),
}
_WRITER_VALUES: dict[str, dict[str, tuple[str, ...]]] = {
    "parquet": {
        "compression": ("none", "uncompressed", "snappy", "gzip", "lz4", "lz4_raw", "zstd")
    },
    "orc": {"compression": ("none", "uncompressed", "snappy", "zlib", "lz4", "zstd")},
    "json": {"compression": ("none", "uncompressed", "gzip", "bzip2", "deflate", "lz4", "snappy")},
    "csv": {"compression": ("none", "uncompressed", "gzip", "bzip2", "deflate", "lz4", "snappy")},
}


class OptionError(ValueError):
    """An option a job gives Spark is not allowed: `key` as given, `reason` for a person."""

    def __init__(self, key: str, reason: str):
        self.key = key
        self.reason = reason
        super().__init__(f"option {key!r} {reason}")


def normalized_reader_options(fmt: str | None, options) -> dict[str, str]:
    """`options` as Spark's reader of `fmt` takes them (allowlisted names as spelled here, values
    as text); `fmt` None (a connector whose format each batch's file suffixes decide) allows a
    name of any format's reader. OptionError names the first key that is not allowed."""
    if fmt is None:
        allowed = tuple(dict.fromkeys(name for names in READER_OPTIONS.values() for name in names))
    else:
        allowed = READER_OPTIONS.get(fmt, ())
    return _normalized(options, allowed, _READER_VALUES, role=f"{fmt or 'file'} reader")


def normalized_writer_options(fmt: str, options) -> dict[str, str]:
    """`options` as Spark's writer of `fmt` takes them; OptionError names the first bad key."""
    return _normalized(
        options, WRITER_OPTIONS.get(fmt, ()), _WRITER_VALUES.get(fmt, {}), role=f"{fmt} writer"
    )


def _normalized(options, allowed: tuple[str, ...], values: dict, *, role: str) -> dict[str, str]:
    if options is None:
        return {}
    if not isinstance(options, dict):
        raise OptionError("", f"must be an object of Spark {role} options")
    by_lower = {name.lower(): name for name in allowed}
    normalized: dict[str, str] = {}
    for key, value in options.items():
        # ASCII only: Python's and Java's lower-casing agree there, and nothing else can match
        name = by_lower.get(key.lower()) if isinstance(key, str) and key.isascii() else None
        if name is None:
            raise OptionError(
                str(key),
                f"is not a Spark {role} option Tidemark passes on (names that reach Hadoop's or "
                f"Spark's configuration never are); allowed: {', '.join(allowed) or 'none'}",
            )
        if name in normalized:
            raise OptionError(str(key), f"repeats {name!r} (option names ignore case)")
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, str | int | float):
            text = str(value)
        else:
            raise OptionError(str(key), "must be a string, number or boolean")
        choices = values.get(name)
        if choices is not None and text.lower() not in {c.lower() for c in choices}:
            raise OptionError(str(key), f"must be one of {', '.join(choices)}, got {text!r}")
        normalized[name] = text
    return normalized
