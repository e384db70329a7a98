"""Deleting from the command line: `tidemark jobs delete`, `tidemark connectors delete` and
`apply --prune LABEL`, against the production web server (gunicorn), with the roles enforced by
the server and a running batch refused."""

import pytest

from tests.support.cli_fixtures import PASSWORD, Cli, one_line_error

FILE = """version: 1
connectors:
  - name: mine
    kind: files
    labels: [mine]
    config: {path: ../var/demo/landing}
  - name: mine-spare
    kind: files
    labels: [mine]
    config: {path: ../var/demo/landing}
jobs:
  - {name: mine-a, connector: mine, processor: passthrough, batch_weight: 10,
     sink: {kind: files, path: ../var/out/a, format: parquet}}
  - {name: mine-b, connector: mine, processor: passthrough, batch_weight: 10,
     sink: {kind: files, path: ../var/out/b, format: parquet}}
"""

# the same file a week later: mine-b and mine-spare are gone from it
SMALLER = """version: 1
connectors:
  - name: mine
    kind: files
    labels: [mine]
    config: {path: ../var/demo/landing}
jobs:
  - {name: mine-a, connector: mine, processor: passthrough, batch_weight: 10,
     sink: {kind: files, path: ../var/out/a, format: parquet}}
"""

OTHERS = """version: 1
connectors:
  - {name: theirs, kind: files, labels: [other], config: {path: ../var/demo/landing}}
jobs:
  - {name: theirs-a, connector: theirs, processor: passthrough, batch_weight: 10,
     sink: {kind: files, path: ../var/out/t, format: parquet}}
"""


def _user(name: str, role: str):
    from django.contrib.auth.models import Group, User

    user = User.objects.create_user(username=name, password=PASSWORD)
    user.groups.add(Group.objects.get(name=role))
    return user


def _login(cli, username: str):
    cli.run("login", "--url", cli.url, "--username", username, "--password-stdin", input=PASSWORD)


@pytest.mark.django_db(transaction=True)
def test_jobs_and_connectors_are_deleted_by_an_admin_only_and_say_what_goes(
    api_server,
    admin,
    workdir,
    tmp_path,
):
    from inventory.models import Batch, Connector, Job, Watermark
    from inventory.services import lifecycle

    cli = Cli(api_server, tmp_path / "admin")
    cli.login()
    pipelines = workdir / "examples" / "mine.yaml"
    pipelines.write_text(FILE)
    cli.run("apply", "-f", pipelines)
    job = Job.objects.get(name="mine-a")

    # an operator and a viewer may not delete: the server refuses, one line, nothing goes
    for role in ("operator", "viewer"):
        _user(f"cli-{role}", role)
        other = Cli(api_server, tmp_path / role)
        _login(other, f"cli-{role}")
        refused = one_line_error(other.run("jobs", "delete", "mine-a", "--yes", ok=False))
        assert refused == "error: this needs the admin role", refused
        refused = one_line_error(other.run("connectors", "delete", "mine-spare", "--yes", ok=False))
        assert refused == "error: this needs the admin role", refused
    assert Job.objects.filter(name="mine-a").exists()
    assert Connector.objects.filter(name="mine-spare").exists()

    # without a terminal to ask on, and without --yes, nothing is deleted
    asked = one_line_error(cli.run("jobs", "delete", "mine-a", ok=False))
    assert "run it in a terminal or add --yes" in asked
    # a connector that jobs read is refused, naming them and the way out
    used = one_line_error(cli.run("connectors", "delete", "mine", "--yes", ok=False))
    assert "read by job(s) mine-a, mine-b; delete them first" in used
    # a dry run checks and keeps everything
    dry = cli.run("jobs", "delete", "mine-a", "--dry-run").stdout
    assert dry.startswith("would delete job mine-a:") and "nothing deleted" in dry
    assert Job.objects.filter(name="mine-a").exists()

    # a running batch: refused (cancel it or let it finish first)
    from inventory.services.assets import assets_register

    connector = Connector.objects.get(name="mine")
    assets_register(connector=connector, items=[(f"{connector.config['path']}/x.parquet", 5, {})])
    batch = lifecycle.batch_acquire(job=job, worker="w")
    running = one_line_error(cli.run("jobs", "delete", "mine-a", "--yes", ok=False))
    assert f"batch {batch.pk} of job mine-a is running; cancel it or wait" in running
    cli.run("batches", "cancel", batch.pk)

    done = cli.run("jobs", "delete", "mine-a", "--yes").stdout
    assert done.startswith("deleted job mine-a: its 1 batch(es), its watermark")
    assert "what it wrote to its files sink stays" in done
    assert not Job.objects.filter(name="mine-a").exists()
    assert not Batch.objects.filter(pk=batch.pk).exists()
    assert not Watermark.objects.filter(job_id=job.pk).exists()
    assert (
        "deleted connector mine-spare"
        in cli.run("connectors", "delete", "mine-spare", "--yes").stdout
    )
    assert not Connector.objects.filter(name="mine-spare").exists()
    gone = one_line_error(cli.run("jobs", "delete", "mine-a", "--yes", ok=False))
    assert gone == "error: there is no job named 'mine-a'"


@pytest.mark.django_db(transaction=True)
def test_apply_prune_deletes_what_the_file_no_longer_declares_within_its_label(
    api_server,
    admin,
    workdir,
    tmp_path,
):
    from inventory.models import Connector, Job

    cli = Cli(api_server, tmp_path / "admin")
    cli.login()
    pipelines = workdir / "examples" / "mine.yaml"
    others = workdir / "examples" / "others.yaml"
    others.write_text(OTHERS)
    cli.run("apply", "-f", others)
    pipelines.write_text(FILE)
    cli.run("apply", "-f", pipelines)

    pipelines.write_text(SMALLER)
    # without --prune, what the file leaves out stays
    assert "No changes" in cli.run("apply", "-f", pipelines).stdout
    plan = cli.run("plan", "-f", pipelines, "--prune", "mine").stdout
    assert "- job mine-b: delete (not in the file)" in plan
    assert "- connector mine-spare: delete (not in the file)" in plan
    assert "theirs" not in plan  # another label's objects are not this file's
    assert "Plan: 0 to create, 0 to change, 0 to reset, 2 unchanged, 2 to delete." in plan
    summary = cli.json("plan", "-f", pipelines, "--prune", "mine")["summary"]
    assert summary["delete"] == 2
    assert Job.objects.filter(name="mine-b").exists()  # a plan deletes nothing

    applied = cli.run("apply", "-f", pipelines, "--prune", "mine").stdout
    assert "deleted job mine-b with its batches and watermark history" in applied
    assert "deleted connector mine-spare" in applied
    assert "Applied: 0 created, 0 changed, 0 reset, 2 unchanged, 2 deleted." in applied
    assert set(Job.objects.values_list("name", flat=True)) == {"mine-a", "theirs-a"}
    assert set(Connector.objects.values_list("name", flat=True)) == {"mine", "theirs"}
    assert "No changes" in cli.run("apply", "-f", pipelines, "--prune", "mine").stdout

    # an operator's plan shows the deletions it may not make
    _user("cli-operator", "operator")
    operator = Cli(api_server, tmp_path / "operator")
    _login(operator, "cli-operator")
    pipelines.write_text(SMALLER.split("jobs:")[0])
    plan = operator.run("plan", "-f", pipelines, "--prune", "mine").stdout
    assert "- job mine-a: delete (not in the file)" in plan
    assert "(your role may not make this change)" in plan
    refused = one_line_error(operator.run("apply", "-f", pipelines, "--prune", "mine", ok=False))
    assert refused == "error: job mine-a: this needs the admin role", refused
    assert Job.objects.filter(name="mine-a").exists()
