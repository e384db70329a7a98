"""Every URL of the URLconf, with objects of the `world` fixture named in it (`_all_urls`,
`_api_methods`), the public ones, and the lowest role that may call each API write
(`WRITE_ROLES`)."""

import re

from django.apps import apps
from django.urls import URLResolver, get_resolver

# logging in, logging out (which only ends one's own session), the API's login (a token for a
# username and password: tidemark login), and the icon browsers ask for
PUBLIC = {
    "accounts/login/",
    "admin/login/",
    "accounts/logout/",
    "admin/logout/",
    "api/v1/auth/token/",
    "favicon.ico",  # a redirect to the static icon, as /static/ itself is public
}


def _patterns(resolver=None, prefix=""):
    for pattern in (resolver or get_resolver()).url_patterns:
        if isinstance(pattern, URLResolver):
            yield from _patterns(pattern, prefix + str(pattern.pattern))
        else:
            yield prefix + str(pattern.pattern), pattern


def _object_id(admin_path: str, world) -> str:
    app_label, model_name = admin_path.split("/")[1:3]
    model = apps.get_model(app_label, model_name)
    if model._meta.proxy:
        model = model._meta.concrete_model
    first = model.objects.order_by("pk").values_list("pk", flat=True).first()
    return str(first if first is not None else 1)


def _url(pattern: str, world) -> str | None:
    """A concrete URL for a pattern of the URLconf, naming objects of `world`."""
    if "drf_format_suffix" in pattern or "(?P<url>" in pattern:
        return None  # the same views as their plain patterns
    path = pattern.replace("^", "").replace("$", "")
    path = re.sub(r"\\\.\(\?P<format>[^)]*\)/\?", ".json", path)
    kind = path.split("/")[2] if path.startswith("api/v1/") else path.split("/")[0]
    names = {"connectors": world["connector"].name, "jobs": world["job"].name}
    pks = {"batches": world["dead"].pk, "backfills": world["backfill"].pk}
    actions = {"connectors": "pause", "jobs": "pause", "backfills": "pause", "batches": "retry"}
    path = re.sub(r"\(\?P<name>[^)]*\)|<slug:name>", names.get(kind, "x"), path)
    path = re.sub(r"\(\?P<pk>[^)]*\)|<int:pk>", str(pks.get(kind, 1)), path)
    path = path.replace("<str:action>", actions.get(kind, "x"))
    path = re.sub(r"\(\?P<app_label>[^)]*\)", "inventory", path)
    if path.startswith("admin/r/"):  # "view on site" redirects
        path = path.replace("<path:content_type_id>", "1").replace("<path:object_id>", "1")
    if "<path:object_id>" in path:
        path = path.replace("<path:object_id>", _object_id(path, world))
    path = path.replace("<id>", str(world["dead"].job.pk))
    path = path.replace("<int:watermark_id>", str(world["job"].watermark.pk))
    assert "<" not in path and "(?" not in path, path
    return "/" + path


def _all_urls(world) -> list[str]:
    urls = [_url(pattern, world) for pattern, _ in _patterns()]
    return sorted({url for url in urls if url})


def _api_methods(world) -> list[tuple[str, str]]:
    """(method, url) for every API route and method it answers (format suffixes left out)."""
    found = []
    for pattern, route in _patterns():
        actions = getattr(route.callback, "actions", None)
        if not actions or "(?P<format>" in pattern:
            continue
        url = _url(pattern, world)
        found.extend((method, url) for method in actions if method not in ("head", "options"))
    return found


# lowest role for each API write; a new endpoint fails the walk until it is listed here
WRITE_ROLES = {
    ("post", "/api/v1/connectors/"): "admin",
    ("patch", "/api/v1/connectors/{connector}/"): "admin",
    ("delete", "/api/v1/connectors/{connector}/"): "admin",
    ("post", "/api/v1/connectors/{connector}/reset/"): "admin",
    ("post", "/api/v1/connectors/{connector}/pause/"): "operator",
    ("post", "/api/v1/connectors/{connector}/resume/"): "operator",
    ("post", "/api/v1/connectors/{connector}/discover/"): "operator",
    ("post", "/api/v1/connectors/{connector}/assets/"): "operator",
    ("post", "/api/v1/jobs/"): "admin",
    ("patch", "/api/v1/jobs/{job}/"): "admin",
    ("delete", "/api/v1/jobs/{job}/"): "admin",
    ("post", "/api/v1/jobs/{job}/watermark/"): "admin",
    ("post", "/api/v1/jobs/{job}/run/"): "operator",
    ("post", "/api/v1/jobs/{job}/pause/"): "operator",
    ("post", "/api/v1/jobs/{job}/resume/"): "operator",
    ("post", "/api/v1/jobs/{job}/acquire/"): "operator",
    ("post", "/api/v1/jobs/{job}/acquire-batches/"): "operator",
    ("post", "/api/v1/jobs/{job}/succeed-batches/"): "operator",
    ("post", "/api/v1/batches/{batch}/skip/"): "admin",
    ("post", "/api/v1/batches/{batch}/retry/"): "operator",
    ("post", "/api/v1/batches/{batch}/cancel/"): "operator",
    ("post", "/api/v1/batches/{batch}/heartbeat/"): "operator",
    ("post", "/api/v1/batches/{batch}/succeed/"): "operator",
    ("post", "/api/v1/batches/{batch}/fail/"): "operator",
    ("post", "/api/v1/backfills/"): "operator",
    ("post", "/api/v1/backfills/preview/"): "viewer",
    ("post", "/api/v1/backfills/{backfill}/pause/"): "operator",
    ("post", "/api/v1/backfills/{backfill}/resume/"): "operator",
    ("post", "/api/v1/backfills/{backfill}/cancel/"): "operator",
}


def _template(url: str, world) -> str:
    return (
        url.replace(f"/{world['connector'].name}/", "/{connector}/")
        .replace(f"/{world['job'].name}/", "/{job}/")
        .replace(f"batches/{world['dead'].pk}/", "batches/{batch}/")
        .replace(f"backfills/{world['backfill'].pk}/", "backfills/{backfill}/")
    )
