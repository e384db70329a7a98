"""What every API shape shares: configs shown masked, the error body (integer bounds:
inventory.bounds)."""

from rest_framework import serializers

from inventory.services.secrets import mask


def public_config(value):
    """A copy of a config (or an error, a result) with every secret-looking key and every
    credential inside a string masked, at any depth (inventory.services.secrets)."""
    return mask(value)


class PublicJSONField(serializers.JSONField):
    """A JSON object shown through public_config."""

    def to_representation(self, value):
        return super().to_representation(public_config(value))


class AnyJSONField(serializers.JSONField):
    """Any JSON value (schema: no type constraint)."""


class ErrorSerializer(serializers.Serializer):
    detail = serializers.CharField()
    code = serializers.CharField(
        required=False, help_text="409 only: `conflict`, or `staleattempt` when a lease was lost"
    )
