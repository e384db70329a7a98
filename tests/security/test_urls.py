"""Every URL and host a user gives is read by one function (inventory/services/urls.py) that
reads hosts the way the HTTP and S3 clients do, and any URL it cannot read is a 400 naming the
field (issue 42, item 9).

A fullwidth `@` (U+FF20) in `endpoint_url`, a connector's or a sink's path or an asset's location
made Python's urlsplit raise ValueError (the netloc changes under NFKC normalisation) deep inside
a check: a 500. The differential test feeds generated URLs to the check and to the clients' own
parsers (urllib3, which botocore sends through; urllib.parse, which fsspec and botocore's
endpoint check use) and fails when the check's host differs from theirs or the check lets a
host through that the deployment does not allow."""

import urllib.parse

import pytest
from botocore.utils import is_valid_endpoint_url
from django.conf import settings
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from urllib3.util import parse_url

from inventory.models import Connector, Job
from inventory.services import endpoints
from inventory.services.errors import InvalidInput
from inventory.services.urls import url_parse
from tests.support.api_support import token_client
from tests.support.factories import ConnectorFactory

FULLWIDTH_AT = "\uff20"

# hosts and authorities a URL can smuggle: NFKC look-alikes, userinfo, IDNA, backslashes
ODD_AUTHORITIES = [
    f"127.0.0.1{FULLWIDTH_AT}evil.example",
    f"bucket{FULLWIDTH_AT}evil",
    "user:pass@127.0.0.1",
    "127.0.0.1@evil.example",
    "evil.example\\@127.0.0.1",
    "b\u00fccher.example",  # IDNA: bücher
    "127.0.0.1\uff0eevil",  # fullwidth full stop
    "127.0.0.1\u3002evil",  # ideographic full stop (IDNA reads it as '.')
    "EVIL\u212a.example",  # Kelvin sign, NFKC 'K'
    "127.0.0.1:99999",
    "127.0.0.1:80:80",
    "[::1",
    "127.0.0.1\t",
    "127.0.0.1 .evil",
]


def _refused(response, field: str):
    assert response.status_code == 400, (response.status_code, response.content[:300])
    assert field in response.json(), response.json()


@pytest.mark.django_db
@pytest.mark.parametrize("authority", ODD_AUTHORITIES)
def test_an_odd_host_in_a_connector_url_is_a_400_naming_the_field(role_users, authority):
    api = token_client(role_users["admin"])
    cases = [
        ({"path": f"s3://{authority}/in/"}, "config.path"),
        ({"path": f"http://{authority}/in/"}, "config.path"),
        (
            {"path": "s3://bucket/in/", "endpoint_url": f"http://{authority}/"},
            "config.endpoint_url",
        ),
    ]
    for config, field in cases:
        response = api.post(
            "/api/v1/connectors/",
            {"name": "odd", "kind": "files", "config": config},
            format="json",
        )
        _refused(response, field)
    assert not Connector.objects.filter(name="odd").exists()


@pytest.mark.django_db
@pytest.mark.parametrize("authority", [f"a{FULLWIDTH_AT}b", "user@host"])
def test_an_odd_host_in_a_sink_path_or_an_asset_location_is_a_400(role_users, authority):
    connector = ConnectorFactory(name="local", config={"path": str(settings.DATA_DIR / "in")})
    admin = token_client(role_users["admin"])
    response = admin.post(
        "/api/v1/jobs/",
        {
            "name": "odd-sink",
            "connector": connector.name,
            "batch_weight": 10,
            "sink": {"kind": "files", "path": f"s3://{authority}/out/"},
        },
        format="json",
    )
    assert response.status_code == 400, response.content
    assert any(key.startswith("sink") for key in response.json()), response.json()
    assert not Job.objects.filter(name="odd-sink").exists()

    operator = token_client(role_users["operator"])
    for location in (f"s3://{authority}/x.parquet", f"http://{authority}/x.parquet"):
        response = operator.post(
            f"/api/v1/connectors/{connector.name}/assets/",
            {"assets": [{"location": location}]},
            format="json",
        )
        assert response.status_code == 400, response.content

    store = ConnectorFactory(name="store", config={"path": "s3://bucket/in/"})
    response = operator.post(
        f"/api/v1/connectors/{store.name}/assets/",
        {"assets": [{"location": f"s3://{authority}/in/x.parquet"}]},
        format="json",
    )
    assert response.status_code == 400, response.content


def test_the_check_names_the_character_it_refuses():
    with pytest.raises(InvalidInput) as refused:
        url_parse(f"http://127.0.0.1{FULLWIDTH_AT}evil/", field="config.endpoint_url")
    assert refused.value.field == "config.endpoint_url"
    assert "U+FF20 FULLWIDTH COMMERCIAL AT" in refused.value.message
    with pytest.raises(InvalidInput, match="user@host"):
        url_parse("http://u:p@127.0.0.1/", field="f")


# ---- differential: the check's host against the clients' ----------------------------------


def _chars(alphabet: str):
    return st.text(alphabet=alphabet, min_size=0, max_size=12)


_tricky = (
    "abcAZ019.-_:@[]\\/?#% \t\n"
    "\uff20\uff0e\u3002\u212a\u00fc\u0131\u200b\u00a0\ufe6b\u2100\uff1a\uff0f"
)
authorities = st.one_of(
    _chars(_tricky),
    st.tuples(
        st.sampled_from(["127.0.0.1", "evil.example", "allowed.test", "[::1]", ""]),
        _chars(_tricky),
        st.sampled_from(["", ":80", ":9000", ":0", ":65536"]),
    ).map("".join),
)
urls = st.tuples(
    st.sampled_from(["http://", "https://", "HTTP://", "s3://", "http:/", "http:\\\\"]),
    authorities,
    st.sampled_from(["", "/", "/a/b", "?q=1", "#f", "\\x"]),
).map("".join)


def _library_host(url: str) -> tuple[str | None, int | None]:
    """(host, port) as urllib3 connects to them (botocore's HTTP layer)."""
    parsed = parse_url(url)
    host = parsed.host.strip("[]").lower() if parsed.host else None
    return host, parsed.port


@hypothesis_settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(url=urls)
def test_the_checks_host_is_the_clients_host(url):
    try:
        checked = url_parse(url, field="f")
    except InvalidInput:
        return  # refused: nothing is connected to
    if not checked.host:
        return  # no authority: not a URL anything connects through
    host, port = _library_host(url)
    assert host == checked.host, (url, checked)
    assert (port or None) == checked.port, (url, checked)
    split = urllib.parse.urlsplit(url)
    assert (split.hostname or "") == checked.host, (url, checked)
    assert split.port == checked.port, (url, checked)
    # botocore accepts it as an endpoint only with the same host
    if checked.scheme in ("http", "https") and is_valid_endpoint_url(url):
        assert urllib.parse.urlsplit(url).hostname == checked.host


@pytest.mark.django_db
@hypothesis_settings(max_examples=800, deadline=None, suppress_health_check=list(HealthCheck))
@given(url=urls)
def test_an_endpoint_the_check_accepts_is_one_the_deployment_allows(url):
    """Whatever the spelling, url_check lets a URL through only when the host and port urllib3
    would connect to are an allowed endpoint (the suite allows http://127.0.0.1, any port)."""
    try:
        endpoints.url_check(url, field="config.endpoint_url")
    except InvalidInput:
        return
    host, port = _library_host(url)
    scheme = parse_url(url).scheme
    assert endpoints.endpoint_allowed(scheme, host, port or endpoints.DEFAULT_PORTS[scheme])
