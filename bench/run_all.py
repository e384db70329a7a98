"""Run every benchmark in bench/ and rewrite docs/benchmarks.md (`make bench`).

A benchmark is a script `bench/bench_<name>.py`; it writes its section to `bench/out/<name>.md`
(see bench/README.md). This runner runs them in name order with the project's Python, then writes
docs/benchmarks.md: a header with the machine, the versions and the date, then every section.

    python bench/run_all.py              # all benchmarks
    python bench/run_all.py inventory    # only bench_inventory.py: its section replaced in place;
                                         # the header and the other sections kept as they are
                                         # (each section carries its own date)

A failing benchmark does not stop the others; its section then says it failed, and the runner
exits non-zero.
"""

import json
import platform
import re
import subprocess
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

DOC = common.ROOT / "docs" / "benchmarks.md"


# not a benchmark: bench_soak.py is the soak's driver (hours at full size; `make soak` runs it
# through tests/soak/test_small_soak.py, and docs/reliability.md holds its figures)
NOT_BENCHMARKS = {"soak"}


def discover() -> dict[str, Path]:
    found = {
        path.stem.removeprefix("bench_"): path
        for path in sorted(common.BENCH_DIR.glob("bench_*.py"))
    }
    return {name: path for name, path in found.items() if name not in NOT_BENCHMARKS}


def run(name: str, script: Path) -> tuple[bool, float]:
    print(f"== {script.relative_to(common.ROOT)}", flush=True)
    started = time.perf_counter()
    proc = subprocess.run([sys.executable, str(script)], cwd=common.ROOT)
    elapsed = time.perf_counter() - started
    ok = proc.returncode == 0 and (common.OUT_DIR / f"{name}.md").exists()
    if proc.returncode != 0:
        common.write_section(
            name,
            f"## {name}\n\n**This benchmark failed** on {common.now_utc()} "
            f"(`{script.relative_to(common.ROOT)}` exited with {proc.returncode}); "
            "see the output of `make bench`.",
        )
    print(f"== {name}: {'ok' if ok else 'FAILED'} in {elapsed:.0f} s", flush=True)
    return ok, elapsed


def _version(dist: str) -> str:
    try:
        return version(dist)
    except PackageNotFoundError:
        return "not installed"


def server_version() -> str:
    """The settings' PostgreSQL server version (the server every benchmark uses)."""
    try:
        import psycopg2

        conn = psycopg2.connect(**common.psycopg2_params(common.base_database()))
        try:
            with conn.cursor() as cur:
                cur.execute("SHOW server_version")
                return cur.fetchone()[0]
        finally:
            conn.close()
    except Exception as exc:  # the header still gets written
        return f"unknown ({type(exc).__name__})"


def peer_versions() -> str:
    python = common.BENCH_DIR / ".venv-pybatchintory" / "bin" / "python"
    if not python.exists():
        return "not installed"
    try:
        out = subprocess.run(
            [str(python), str(common.BENCH_DIR / "pybatchintory_driver.py"), "--versions"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        found = json.loads(out)
        return ", ".join(f"{k} {v}" for k, v in found.items())
    except (OSError, subprocess.CalledProcessError, ValueError):
        return "unknown"


def header(timings: dict) -> str:
    m = common.machine()
    import os

    server = "the server in DATABASE_URL" if os.environ.get("DATABASE_URL") else "embedded pgserver"
    rows = [
        ["date", common.now_utc()],
        ["commit", common.git_revision()],
        ["machine", f"{m['nproc']} CPUs ({m['cpu']}), {m['memory_gib']} GiB memory, {m['os']}"],
        ["Python", platform.python_version()],
        ["PostgreSQL server", f"{server_version()} ({server})"],
        ["Django", _version("Django")],
        ["psycopg2", _version("psycopg2-binary")],
        ["pyspark", _version("pyspark")],
        ["pybatchintory (own venv)", peer_versions()],
        [
            "benchmarks run",
            ", ".join(f"{name} ({seconds:.0f} s)" for name, seconds in timings.items()) or "none",
        ],
    ]
    return "\n".join(
        [
            "# Benchmarks",
            "",
            "Written by `make bench` (`bench/run_all.py`), which runs every `bench/bench_*.py` and "
            "rewrites this file. Do not edit by hand. The figures are from the machine described here "
            "and depend on its load: on the shared 2-core development machine absolute rates moved "
            "2-3x between runs, while ratios measured within one run (where the systems alternate) "
            "were steadier.",
            "",
            common.table(["", ""], rows),
            "",
        ]
    )


MARK = "<!-- bench: {} -->"


def kept_sections() -> dict[str, str]:
    """The sections of the current docs/benchmarks.md by benchmark name (each starts with MARK)."""
    if not DOC.exists():
        return {}
    kept = {}
    for part in re.split(r"(?m)^(?=<!-- bench: )", DOC.read_text())[1:]:
        name = re.match(r"<!-- bench: (\w+) -->", part)
        if name:
            kept[name.group(1)] = part
    return kept


def spliced(names: list[str]) -> str | None:
    """docs/benchmarks.md with the sections of `names` replaced in place by their new output
    (appended when new), its header and every other section as they are: a partial run says
    nothing of the benchmarks it did not run (None: no file yet)."""
    if not DOC.exists():
        return None
    parts = re.split(r"(?m)^(?=<!-- bench: )", DOC.read_text())
    found = {}
    for index, part in enumerate(parts[1:], start=1):
        name = re.match(r"<!-- bench: (\w+) -->", part)
        if name:
            found[name.group(1)] = index
    for name in names:
        out = common.OUT_DIR / f"{name}.md"
        if not out.exists():
            continue
        section = f"{MARK.format(name)}\n{out.read_text().rstrip()}\n"
        if name in found:
            parts[found[name]] = section + ("\n" if found[name] < len(parts) - 1 else "")
        else:
            parts[-1] = parts[-1].rstrip() + "\n\n"
            parts.append(section)
    return "".join(parts)


def main(argv: list[str]) -> int:
    scripts = discover()
    unknown = [name for name in argv if name not in scripts]
    if unknown:
        print(f"unknown benchmark(s): {', '.join(unknown)}; have {', '.join(scripts)}")
        return 2
    selected = argv or list(scripts)
    timings, failed = {}, []
    for name in selected:
        ok, seconds = run(name, scripts[name])
        timings[name] = seconds
        if not ok:
            failed.append(name)
    partial = spliced(selected) if argv else None
    if partial is not None:
        DOC.write_text(partial)
        print(
            f"rewrote the sections {', '.join(selected)} of {DOC.relative_to(common.ROOT)}"
            + (f"; FAILED: {', '.join(failed)}" if failed else "")
        )
        return 1 if failed else 0
    kept = kept_sections()
    sections = []
    for name in scripts:
        out = common.OUT_DIR / f"{name}.md"
        if out.exists():
            sections.append(f"{MARK.format(name)}\n{out.read_text()}")
        elif name in kept:  # not run here (a fresh clone has no bench/out): its last section
            sections.append(kept[name])
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(header(timings) + "\n" + "\n\n".join(s.rstrip() for s in sections) + "\n")
    print(
        f"wrote {DOC.relative_to(common.ROOT)}"
        + (f"; FAILED: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
