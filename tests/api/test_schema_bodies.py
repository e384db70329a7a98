"""What the OpenAPI schema says of the bodies: each component's description is about that body
(never a base serializer's note for developers), and a list of nested objects carries the bounds
the API checks (`succeed-batches/` takes 1 to 100 batches: minItems 1, maxItems 100)."""

import pytest
from drf_spectacular.generators import SchemaGenerator
from rest_framework import serializers

from inventory.api.serializers import strict
from inventory.api.serializers.batches import SucceedBatchesSerializer
from inventory.services.lifecycle.shared import MAX_BATCHES_PER_CALL


@pytest.fixture(scope="module")
def components():
    return SchemaGenerator().get_schema(request=None, public=True)["components"]["schemas"]


def test_no_body_is_described_by_a_base_serializers_docstring(components):
    notes = {strict.Input.__doc__.strip(), strict.KnownFieldsOnly.__doc__.strip()}
    borrowed = [name for name, body in components.items() if body.get("description") in notes]
    assert borrowed == []
    # a body described by a serializer of its own family keeps that description
    assert components["BackfillCreateRequest"]["description"].startswith("A closed range")


def test_a_list_of_nested_bodies_carries_the_bounds_the_api_checks(components):
    field = SucceedBatchesSerializer().fields["batches"]
    assert isinstance(field, serializers.ListSerializer) and not field.allow_empty
    batches = components["SucceedBatchesRequest"]["properties"]["batches"]
    assert (batches["minItems"], batches["maxItems"]) == (1, MAX_BATCHES_PER_CALL)


def test_every_operation_lists_the_answers_every_call_can_get():
    """401 and 403 where a role is needed, 429 everywhere, 400 on every write."""
    paths = SchemaGenerator().get_schema(request=None, public=True)["paths"]
    operations = [
        (f"{method.upper()} {path}", operation["responses"])
        for path, methods in paths.items()
        for method, operation in methods.items()
        if method in ("get", "post", "put", "patch", "delete")
    ]
    assert len(operations) > 40
    anonymous = {"POST /api/v1/auth/token/"}
    missing = [
        f"{name} {code}"
        for name, responses in operations
        for code in ("401", "403", "429")
        if code not in responses and not (name in anonymous and code != "429")
    ]
    missing += [
        f"{name} 400"
        for name, responses in operations
        if name.split()[0] in ("POST", "PUT", "PATCH") and "400" not in responses
    ]
    assert missing == []
    assert "401" not in dict(operations)["POST /api/v1/auth/token/"]
