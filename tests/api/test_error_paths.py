"""A 400 is {path: [reasons]} whoever refuses: DRF's nested errors (a list serializer's elements, a
ListField's, a DictField's, a nested serializer's own reasons) keyed by the path a service would
name (`batches[1].attempt`, `labels[0]`, `result.rows`), the reasons kept in their order."""

from rest_framework import serializers
from rest_framework.exceptions import ErrorDetail, ValidationError

from inventory.api.exceptions import exception_handler, flat_errors


class _Commit(serializers.Serializer):
    id = serializers.IntegerField()
    attempt = serializers.IntegerField(min_value=1)
    result = serializers.DictField(child=serializers.IntegerField(), required=False)

    def validate(self, attrs):
        if attrs["id"] == attrs["attempt"]:
            raise serializers.ValidationError("id and attempt may not be equal")
        return attrs


class _Body(serializers.Serializer):
    batches = _Commit(many=True)
    labels = serializers.ListField(child=serializers.CharField(max_length=3), required=False)


def _refused(data) -> dict:
    serializer = _Body(data=data)
    assert not serializer.is_valid()
    response = exception_handler(ValidationError(serializer.errors), {})
    assert response.status_code == 400
    return response.data


def test_each_nested_reason_is_keyed_by_its_path():
    refused = _refused(
        {
            "batches": [
                {"id": 1, "attempt": 2},
                {"id": 2, "attempt": 0},
                {"id": 3, "attempt": 3},
                {"id": 4, "attempt": 5, "result": {"rows": "many", "bytes": 9}},
            ],
            "labels": ["ok", "long", "no", "four"],
        }
    )
    assert refused == {
        "batches[1].attempt": ["Ensure this value is greater than or equal to 1."],
        "batches[2]": ["id and attempt may not be equal"],
        "batches[3].result.rows": ["A valid integer is required."],
        "labels[1]": ["Ensure this field has no more than 3 characters."],
        "labels[3]": ["Ensure this field has no more than 3 characters."],
    }


def test_a_list_refused_whole_and_a_top_level_reason_keep_their_names():
    assert _refused({"batches": "x"}) == {
        "batches": ['Expected a list of items but got type "str".']
    }
    assert flat_errors({"non_field_errors": [ErrorDetail("no")]}) == {"non_field_errors": ["no"]}
    assert flat_errors({"a": {"non_field_errors": ["x"], "b": ["y", "z"]}}) == {
        "a": ["x"],
        "a.b": ["y", "z"],
    }
