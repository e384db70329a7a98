"""Where a batch's items may be read from, checked again when its spec is built: shared by the
kinds whose items are files or objects (local directories, meta tables of paths, object stores,
an upstream job's outputs)."""

import os

from inventory.services.assets import location_inside
from inventory.services.confinement import path_confined
from inventory.services.errors import InvalidInput
from inventory.services.urls import url_parse
from inventory.sources.object_store.access import OBJECT_STORE_SCHEMES


def object_location_check(location: str, *, field: str) -> None:
    """A local path under the allowed roots, or an object-store URL of a scheme Tidemark reads."""
    scheme = url_parse(location, field=field).scheme
    if not scheme:
        path_confined(location, field)
    elif scheme not in OBJECT_STORE_SCHEMES:
        raise InvalidInput(field, f"{scheme}: locations are not read")


def local_items(items: list, *, base: str | None, field: str = "connector.config.path") -> list:
    """A local files connector's items as the worker reads them: inside the connector's directory
    (a relative location is relative to it), or, without a directory (a meta table of paths),
    under the allowed roots."""
    confined = []
    for item in items:
        location = str(item)
        if base:
            location_inside(location, base=base, field=field)
            confined.append(os.path.join(base, location))
        else:
            object_location_check(location, field=field)
            confined.append(location)
    return confined
