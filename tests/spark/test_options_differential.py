"""Reader and writer options, checked as Spark applies them (issue 42, item 2): generated variants
of option names go through Tidemark's one allowlist (workers/spark/options.py) and, when it
accepts them, through a real read in the session's Spark, whose Hadoop configuration for that read
(what `newHadoopConfWithOptions` builds from the relation's options) and whose input paths are
observed. The test fails whenever the check accepts a name that changes anything in Hadoop's
configuration other than the allowlisted option itself, or makes Spark read another path."""

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from workers.spark.options import (
    READER_OPTIONS,
    WRITER_OPTIONS,
    OptionError,
    normalized_reader_options,
    normalized_writer_options,
)
from workers.spark.sources.files import read_items

# what an attacker would reach for: Hadoop's file systems, Spark's own keys, the path option
DANGEROUS = (
    "fs.defaultFS",
    "fs.file.impl",
    "fs.file.impl.disable.cache",
    "fs.viewfs.mounttable.default.link./data",
    "fs.webhdfs.impl",
    "hadoop.security.authentication",
    "mapreduce.input.fileinputformat.input.dir.recursive",
    "parquet.crypto.factory.class",
    "parquet.compression",
    "spark.sql.files.ignoreCorruptFiles",
    "spark.hadoop.fs.defaultFS",
    "io.compression.codecs",
    "path",
    "paths",
    "compression.codec.class",
)
# characters that look like nothing, like a space or like an ASCII letter to a reader
LOOKALIKES = (
    " ",
    "\t",
    "\n",
    "\u00a0",
    "\u200b",
    "\u2028",
    "\u3000",
    "\ufeff",
    "\u0130",  # İ, whose lower case is i + a combining dot
    "\u0131",  # ı, dotless i, whose upper case is I
    "\u017f",  # ſ, long s, whose upper case is S
    "\u212a",  # Kelvin sign, whose lower case is k
    "\uff46",  # fullwidth f
    ".",
    "_",
    "-",
)


def _mutate(draw, name: str) -> str:
    chars = list(name)
    for index in range(len(chars)):
        if draw(st.booleans()):
            chars[index] = chars[index].swapcase()
    for _ in range(draw(st.integers(0, 2))):
        at = draw(st.integers(0, len(chars)))
        chars.insert(at, draw(st.sampled_from(LOOKALIKES)))
    if chars and draw(st.booleans()):
        at = draw(st.integers(0, len(chars) - 1))
        replaced = chars[at]
        chars[at] = {"i": "\u0131", "s": "\u017f", "k": "\u212a", "f": "\uff46"}.get(
            replaced.lower(), replaced
        )
    return "".join(chars)


@st.composite
def option_names(draw, allowed: tuple[str, ...]) -> str:
    return _mutate(draw, draw(st.sampled_from(DANGEROUS + allowed)))


_VALUES = {
    "mode": "FAILFAST",
    "compression": "gzip",
    "datetimeRebaseMode": "CORRECTED",
    "int96RebaseMode": "CORRECTED",
    "unescapedQuoteHandling": "STOP_AT_DELIMITER",
    "timeZone": "UTC",
    "locale": "en-US",
    "encoding": "UTF-8",
    "charset": "UTF-8",
    "samplingRatio": "1.0",
    "maxColumns": "10",
    "maxCharsPerColumn": "-1",
    "sep": ";",
    "delimiter": ";",
    "lineSep": "\n",
    "quote": "'",
    "escape": "\\",
    "charToEscapeQuoteEscaping": "\\",
}


def _value(name: str) -> str:
    """A value Tidemark accepts for the allowlisted name `name` spells (in any case), else one
    that is also a valid fs.defaultFS, so a read under it still works."""
    by_lower = {key.lower(): value for key, value in _VALUES.items()}
    return by_lower.get(name.lower(), "file:///") if name.isascii() else "file:///"


@pytest.fixture(scope="module")
def probe(spark, tmp_path_factory):
    """(fmt, options) -> (the Hadoop configuration entries the read sets beyond the session's,
    the paths Spark reads), for options Spark is given as they are."""
    folder = tmp_path_factory.mktemp("options")
    files = {"json": folder / "a.json", "csv": folder / "a.csv", "parquet": folder / "a.parquet"}
    files["json"].write_text('{"id": 1}\n')
    files["csv"].write_text("id\n1\n")
    pq.write_table(pa.table({"id": pa.array([1], pa.int32())}), files["parquet"])
    session = spark._jsparkSession.sessionState()
    base = _entries(session.newHadoopConf())

    seen: dict[tuple, tuple[dict, list[str]]] = {}

    def observe(fmt: str, options: dict[str, str]) -> tuple[dict, list[str]]:
        # what Spark is handed decides what it does: one real read per distinct handing
        key = (fmt, tuple(sorted(options.items())))
        if key not in seen:
            seen[key] = _observe(fmt, options)
        return seen[key]

    def _observe(fmt: str, options: dict[str, str]) -> tuple[dict, list[str]]:
        df = spark.read.format(fmt).options(**options).schema("id INT").load(str(files[fmt]))
        relation = df._jdf.queryExecution().analyzed().relation()
        conf = _entries(session.newHadoopConfWithOptions(relation.options()))
        changed = {key: value for key, value in conf.items() if base.get(key) != value}
        return changed, [path.removeprefix("file://") for path in df.inputFiles()]

    observe.files = {fmt: str(path) for fmt, path in files.items()}
    return observe


def _lower(names) -> set[str]:
    return {name.lower() for name in names}


def _entries(conf) -> dict[str, str]:
    found, entries = {}, conf.iterator()
    while entries.hasNext():
        entry = entries.next()
        found[entry.getKey()] = entry.getValue()
    return found


def test_the_probe_sees_what_the_engine_applies_without_the_check(probe):
    """The oracle works: as Spark is given them today, a Hadoop key lands in the read's Hadoop
    configuration, in any case (Spark lower-cases the names), and `PATH` is Spark's own path
    option."""
    changed, _ = probe("json", {"fs.file.impl.disable.cache": "true"})
    assert changed.get("fs.file.impl.disable.cache") == "true"
    changed, _ = probe("json", {"Parquet.Compression": "gzip"})
    assert changed == {"parquet.compression": "gzip"}
    with pytest.raises(Exception, match="'path' or 'paths' option"):
        probe("json", {"PATH": "/etc/passwd"})


@pytest.mark.parametrize("fmt", sorted(READER_OPTIONS))
def test_every_allowlisted_reader_option_reaches_nothing_but_itself(probe, fmt):
    options = normalized_reader_options(fmt, {name: _value(name) for name in READER_OPTIONS[fmt]})
    changed, roots = probe(fmt, options)
    assert set(changed) <= _lower(READER_OPTIONS[fmt]), set(changed) - _lower(READER_OPTIONS[fmt])
    assert roots == [probe.files[fmt]]


@pytest.mark.parametrize("fmt", sorted(READER_OPTIONS))
def test_generated_option_names_the_check_accepts_reach_nothing_else(probe, fmt):
    allowed = READER_OPTIONS[fmt]
    accepted = []

    @settings(
        max_examples=400,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture],
    )
    @given(option_names(allowed))
    def check(name):
        try:
            options = normalized_reader_options(fmt, {name: _value(name)})
        except OptionError as refused:
            assert refused.key == name
            return
        # accepted: only an ASCII spelling of an allowlisted name, passed on as spelled there
        assert name.isascii() and name.lower() in {a.lower() for a in allowed}, name
        accepted.append(name)
        changed, roots = probe(fmt, options)
        assert set(changed) <= _lower(allowed), (name, changed)
        assert roots == [probe.files[fmt]], (name, roots)

    check()
    assert accepted  # the generator does reach the accepted side


@pytest.mark.parametrize("fmt", sorted(WRITER_OPTIONS))
def test_generated_writer_option_names_never_pass_a_configuration_key(fmt):
    allowed = WRITER_OPTIONS[fmt]

    @settings(max_examples=300, deadline=None, derandomize=True)
    @given(option_names(allowed))
    def check(name):
        try:
            options = normalized_writer_options(fmt, {name: _value(name)})
        except OptionError:
            return
        assert list(options) and set(options) <= set(allowed), name

    check()


def test_the_reader_applies_only_what_the_check_produced(spark, tmp_path):
    """read_items, the one reader of files (the CLI's local runner, meta tables and native object
    store reads included), refuses a configuration key before Spark and hands Spark the
    allowlist's spelling of an accepted one."""
    from workers.spark.errors import ReadError

    path = tmp_path / "a.csv"
    path.write_text("id;name\n1;a\n")
    with pytest.raises(ReadError, match="'fs.defaultFS' is not a Spark csv reader option"):
        read_items(spark, [str(path)], "csv", options={"fs.defaultFS": "file:///"})
    rows = read_items(spark, [str(path)], "csv", options={"SEP": ";", "HEADER": True}).collect()
    assert [tuple(row) for row in rows] == [("1", "a")]
