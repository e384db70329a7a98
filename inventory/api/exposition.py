"""Prometheus's text format (0.0.4) for many samples that share their label values.

`prometheus_client.generate_latest` checks and escapes every label name and value of every sample
again: about 8 us a sample, a second for the 130,000 samples of 10,000 jobs. Here a family's
names are checked once, when it is made, and a label value (a job's name is in ten families) is
escaped once per render, so a sample costs one formatted line. The output is byte for byte what
generate_latest writes for the same families (tests/api/test_metrics_exposition.py compares them).
"""

import re
from collections.abc import Iterable, Sequence

from prometheus_client.utils import floatToGoString

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
TYPES = ("counter", "gauge")


class Family:
    """One metric family: a name, its help text, counter or gauge, its label names, and its
    samples as (label values in the order of `labels`, value). A counter's samples are written
    as `<name>_total`, as prometheus_client does.

    A family of thousands of samples (one per job) may instead be given as `lines`: its sample
    lines written by the caller, `name{label="value",...} number` with the labels sorted by name,
    each value through `label_value` and each number through `number`: no tuple per sample, no
    second pass over them."""

    __slots__ = ("name", "documentation", "type", "labels", "samples", "lines")

    def __init__(
        self, name: str, documentation: str, labels: Sequence[str] = (), *, type: str = "gauge"
    ):
        if _METRIC_NAME.fullmatch(name) is None:
            raise ValueError(f"not a Prometheus metric name: {name!r}")
        for label in labels:
            if _LABEL_NAME.fullmatch(label) is None or label.startswith("__"):
                raise ValueError(f"not a Prometheus label name: {label!r}")
        if type not in TYPES:
            raise ValueError(f"type must be one of {', '.join(TYPES)}, not {type!r}")
        self.name = name
        self.documentation = documentation
        self.type = type
        self.labels = tuple(labels)
        self.samples: list[tuple[Sequence[str], float]] = []
        self.lines: list[str] = []

    def add(self, values: Sequence[str], value: float) -> None:
        self.samples.append((values, value))


def written_by_prometheus_client(families: Iterable[Family]) -> bytes:
    """The same families as prometheus_client's own metric objects, written by its
    generate_latest: what the tests and the dashboard benchmark hold `render` against."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    built = []
    for family in families:
        kind = CounterMetricFamily if family.type == "counter" else GaugeMetricFamily
        metric = kind(family.name, family.documentation, labels=list(family.labels))
        for values, value in family.samples:
            metric.add_metric(list(values), value)
        built.append(metric)

    class Built:
        def collect(self):
            return built

    registry = CollectorRegistry(auto_describe=False)
    registry.register(Built())
    return generate_latest(registry)


def rewritten_by_prometheus_client(text: bytes) -> bytes:
    """`text` read by Prometheus's parser (prometheus_client.parser) and written again by
    generate_latest: equal to `text` when every line of it is what prometheus_client writes for
    what the parser read (the check of families given as `lines`)."""
    return written_by_prometheus_client(parsed_families(text))


def parsed_families(text: bytes) -> list[Family]:
    """The families Prometheus's parser (prometheus_client.parser) reads in `text`, each with its
    samples as Family.samples."""
    from prometheus_client.parser import text_string_to_metric_families

    families = []
    for parsed in text_string_to_metric_families(text.decode("utf-8")):
        labels = sorted({name for sample in parsed.samples for name in sample.labels})
        family = Family(parsed.name, parsed.documentation, labels, type=parsed.type)
        for sample in parsed.samples:
            family.add([sample.labels[name] for name in labels], sample.value)
        families.append(family)
    return families


def label_value(value: str) -> str:
    """A label value as the text format writes it between its quotes."""
    if "\\" in value or "\n" in value or '"' in value:
        return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
    return value


def number(value: float) -> str:
    """floatToGoString's text, without its float conversion and branches for the common case of
    a count under a million (Go writes 1e+06 and above in exponent form)."""
    if type(value) is int and 0 <= value < 1_000_000:
        return f"{value}.0"
    return floatToGoString(value)


def render(families: Iterable[Family]) -> bytes:
    escaped: dict[str, str] = {}  # label value -> its escaped text, for this render

    def escape(value: str) -> str:
        text = escaped.get(value)
        if text is None:
            text = value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
            escaped[value] = text
        return text

    out: list[str] = []
    for family in families:
        name = family.name + "_total" if family.type == "counter" else family.name
        help_text = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {name} {help_text}\n# TYPE {name} {family.type}\n")
        # generate_latest writes the labels sorted by name
        order = sorted(range(len(family.labels)), key=family.labels.__getitem__)
        keys = [(family.labels[i], i) for i in order]
        if not keys:
            out.extend(f"{name} {number(value)}\n" for _, value in family.samples)
        elif len(keys) == 1:
            head = f'{name}{{{keys[0][0]}="'
            out.extend(
                f'{head}{escape(values[0])}"}} {number(value)}\n'
                for values, value in family.samples
            )
        else:
            # one template per family: `name{a="%s",b="%s"} %s\n` (a name or a label name has no
            # `%`: both are checked against Prometheus's patterns when the family is made)
            template = name + "{" + ",".join(f'{k}="%s"' for k, _ in keys) + "} %s\n"
            positions = [i for _, i in keys]
            if len(positions) == 2:
                a, b = positions
                out.extend(
                    template % (escape(values[a]), escape(values[b]), number(value))
                    for values, value in family.samples
                )
            elif len(positions) == 3:
                a, b, c = positions
                out.extend(
                    template
                    % (escape(values[a]), escape(values[b]), escape(values[c]), number(value))
                    for values, value in family.samples
                )
            else:
                out.extend(
                    template % (*[escape(values[i]) for i in positions], number(value))
                    for values, value in family.samples
                )
        out.extend(family.lines)
    return "".join(out).encode("utf-8")
