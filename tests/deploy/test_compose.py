"""docker-compose.yml cannot be run here (no Docker engine), so check it against the code it runs."""

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _compose():
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def test_it_declares_every_service_the_design_needs():
    services = _compose()["services"]
    assert {"postgres", "redis", "web", "worker", "beat", "spark-master", "spark-worker"} <= set(
        services
    )


def test_its_environment_is_what_the_settings_read():
    settings_source = (ROOT / "controlplane" / "settings.py").read_text()
    read = set(re.findall(r'env_(?:str|bool|int|list)\("([A-Z_]+)"', settings_source))
    read |= {f"{name}_FILE" for name in read}  # env_str accepts NAME_FILE for secrets
    for name in ("web", "worker", "beat"):
        environment = _compose()["services"][name]["environment"]
        unknown = set(environment) - read
        assert not unknown, f"{name} sets variables the settings never read: {unknown}"
        assert {"DATABASE_URL", "REDIS_URL", "SPARK_MASTER"} <= set(environment)


def test_the_worker_points_at_the_spark_master_service():
    services = _compose()["services"]
    master = services["worker"]["environment"]["SPARK_MASTER"]
    host, port = re.match(r"spark://([\w-]+):(\d+)", master).groups()
    assert host in services
    assert any(str(port) in str(p) for p in services[host].get("ports", []))


def test_the_celery_commands_name_the_project_app():
    services = _compose()["services"]
    assert "celery -A controlplane worker" in services["worker"]["command"]
    assert "celery -A controlplane beat" in services["beat"]["command"]
    assert (ROOT / "controlplane" / "celery.py").exists()


def test_the_web_process_is_gunicorn_and_the_image_collects_static_files():
    web = _compose()["services"]["web"]["command"]
    assert "gunicorn controlplane.wsgi:application" in web and "runserver" not in web
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert "collectstatic --noinput" in dockerfile
    assert '"gunicorn", "controlplane.wsgi:application"' in dockerfile
