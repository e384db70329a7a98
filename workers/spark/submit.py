"""Run one batch as its own spark-submit process: `python -m workers.spark.submit SPEC RESULT`.

SPEC is a JSON file holding run_batch's spec plus "spark": {"master": ..., "conf": {...}}.
RESULT receives {"ok": true, "result": {...}} or {"ok": false, "error": {"type", "message",
"detail", "stage"}}; the exit code is 0 or 1 to match. The file is written atomically (temporary
name, then rename), so a reader never sees half of it.

`submit_command` builds the spark-submit command line for this file; `read_result` turns what
the process left behind into run_batch's result or a BatchError.
"""

import json
import os
import sys
import traceback
from pathlib import Path

# spark-submit runs this file as a script: make the project importable first
PROJECT_ROOT = str(Path(__file__).resolve().parents[2])
if PROJECT_ROOT not in sys.path:
    sys.path.insert(0, PROJECT_ROOT)

from workers.spark.errors import BatchError  # noqa: E402
from workers.spark.session import DEFAULT_CONF  # noqa: E402

SUBMIT_FILE = str(Path(__file__).resolve())


def spark_submit_path() -> str:
    """The spark-submit script shipped inside the pyspark package."""
    import pyspark

    return str(Path(pyspark.__file__).resolve().parent / "bin" / "spark-submit")


def submit_command(
    spec_path: str, result_path: str, master: str, conf: dict | None = None
) -> list[str]:
    """The spark-submit command line that runs one batch from `spec_path` into `result_path`."""
    settings = {
        **DEFAULT_CONF,
        # the driver and the Python workers run this interpreter, which has the project's packages
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.executorEnv.PYTHONPATH": PROJECT_ROOT,
        **(conf or {}),
    }
    command = [spark_submit_path(), "--master", master, "--name", "tidemark-batch"]
    for key, value in settings.items():
        command += ["--conf", f"{key}={_conf_value(value)}"]
    return [*command, SUBMIT_FILE, str(spec_path), str(result_path)]


def read_result(result_path: Path, returncode: int, log_path: Path | None = None) -> dict:
    """The result a submitted batch wrote, or BatchError for its error or its silent death."""
    try:
        outcome = json.loads(Path(result_path).read_text())
    except (OSError, ValueError):
        tail = ""
        if log_path is not None and Path(log_path).exists():
            lines = Path(log_path).read_text(errors="replace").splitlines()
            tail = "\n".join(line for line in lines if not line.startswith("\tat "))[-3000:]
        raise BatchError(
            "SparkSubmitFailed",
            f"spark-submit exited with code {returncode} without writing a result",
            tail,
            "submit",
        ) from None
    if outcome.get("ok"):
        return outcome["result"]
    error = outcome.get("error") or {}
    raise BatchError(
        error.get("type", "Error"),
        error.get("message", ""),
        error.get("detail", ""),
        error.get("stage", ""),
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m workers.spark.submit SPEC.json RESULT.json", file=sys.stderr)
        return 2
    spec_path, result_path = argv
    try:
        spec = json.loads(Path(spec_path).read_text())
        if not isinstance(spec, dict):
            raise ValueError("the spec file must hold a JSON object")
    except (OSError, ValueError) as exc:
        _write(result_path, {"ok": False, "error": _error("InvalidSpec", str(exc), "config")})
        return 1

    from workers.spark.processors import load_processor_modules
    from workers.spark.run import run_batch
    from workers.spark.session import get_session, stop_session

    spark_settings = spec.get("spark") or {}
    try:
        load_processor_modules()
        spark = get_session(
            master=_master(spark_settings),
            conf=spark_settings.get("conf") or {},
            app_name=f"tidemark-{spec.get('job')}-{spec.get('batch_id')}",
        )
        try:
            result = run_batch(spark, spec)
        finally:
            stop_session()
    except BatchError as exc:
        _write(result_path, {"ok": False, "error": exc.as_dict()})
        return 1
    except Exception as exc:  # anything unforeseen still reaches the control plane as an error
        detail = "".join(traceback.format_exception(exc)[-5:])
        _write(
            result_path, {"ok": False, "error": _error(type(exc).__name__, str(exc), "", detail)}
        )
        return 1
    _write(result_path, {"ok": True, "result": result})
    return 0


def _master(spark_settings: dict) -> str | None:
    if spark_settings.get("master"):
        return spark_settings["master"]
    # under spark-submit (it hands its JVM over through this variable) keep its --master;
    # run with plain python, default to local
    return None if os.environ.get("PYSPARK_GATEWAY_PORT") else "local[*]"


def _error(type_: str, message: str, stage: str, detail: str = "") -> dict:
    return {"type": type_, "message": message, "detail": detail, "stage": stage}


def _write(path: str, payload: dict) -> None:
    target = Path(path)
    tmp = target.with_name(f".{target.name}.tmp")
    tmp.write_text(json.dumps(payload, default=str))
    os.replace(tmp, target)


def _conf_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


if __name__ == "__main__":
    sys.exit(main())
