"""Items a producer announces to a connector (`POST connectors/{name}/assets/`): checked by the
connector's kind (`check_announce`: a directory or an object store prefix takes them), spelled as
discovery would spell them, and registered in the given order (assets.py hands out the ids)."""

from django.db import transaction

from inventory.models import Asset, Connector, ConnectorState
from inventory.services.assets import (
    Announced,
    _announced_items,
    _check_location_size,
    assets_register,
    canonical_location,
    location_inside,
)
from inventory.services.errors import Conflict, InvalidInput
from inventory.sources.registry import kind_of


def _registrable(connector: Connector) -> None:
    kind_of(connector).check_announce(connector)
    if connector.state == ConnectorState.COMPLETED:
        raise Conflict(f"connector {connector.name} is completed: its item set is closed")


def assets_announce(*, connector: Connector, items) -> Announced:
    """Register items a producer announces (`[{location, weight, extra}]`), in the given order.

    Idempotent: known locations keep their id and are reported as known. Ids follow visibility
    order (the connector's row lock, as for discovery).
    """
    _registrable(connector)
    parsed = _announced_items(items)
    base = (connector.config or {}).get("path")
    canonical: dict[str, int] = {}
    for index, (location, _weight, _extra) in enumerate(parsed):
        location_inside(location, base=base, field=f"assets[{index}].location")
        spelled = canonical_location(location, base=base)
        _check_location_size(spelled, field=f"assets[{index}].location")
        if spelled in canonical:
            raise InvalidInput(
                f"assets[{index}].location",
                f"repeats assets[{canonical[spelled]}].location (both are {spelled})",
            )
        canonical[spelled] = index
    given = [item[0] for item in parsed]
    stored = list(canonical)  # in the given order
    with transaction.atomic():
        # a location stored as given before locations were stored canonically keeps its id
        earlier = dict(
            Asset.objects.filter(connector=connector, location__in=given).values_list(
                "location", "pk"
            )
        )
        new = [
            (spelled, weight, extra)
            for spelled, (location, weight, extra) in zip(stored, parsed, strict=True)
            if location not in earlier
        ]
        registered = assets_register(connector=connector, items=new)
        ids = dict(
            Asset.objects.filter(connector=connector, location__in=stored).values_list(
                "location", "pk"
            )
        )
    return Announced(
        registered=registered,
        known=len(parsed) - registered,
        assets=[
            {"location": location, "id": earlier.get(location) or ids[spelled]}
            for location, spelled in zip(given, stored, strict=True)
        ],
    )
