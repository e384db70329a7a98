"""A job's retention-breach forecast, as the job's detail shows it."""

from rest_framework import serializers

from inventory.models import RetentionForecast


class RetentionForecastSerializer(serializers.ModelSerializer):
    margin_seconds = serializers.FloatField(
        allow_null=True,
        help_text="seconds from computed_at until the job starts losing data at the current "
        "rates (0: losing now); null when no loss is forecast",
    )
    inputs = serializers.JSONField(
        help_text="what the forecast read: per partition, version stream or cleaner, the "
        "retention, the oldest and newest positions, the position the job needs and the rates"
    )

    class Meta:
        model = RetentionForecast
        fields = [
            "verdict",
            "margin_seconds",
            "loss_at",
            "message",
            "inputs",
            "error",
            "computed_at",
        ]
        read_only_fields = fields
