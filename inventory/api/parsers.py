"""The API's JSON parser: a document PostgreSQL cannot store is a 400 naming the field.

A NUL character (`"\\u0000"`) is valid JSON but can be stored neither in a text column nor in
jsonb; refusing it here, for every field of every endpoint, keeps it from surfacing later as a
database error."""

from rest_framework.exceptions import ValidationError
from rest_framework.parsers import JSONParser


def nul_field(value, path: str = "") -> str | None:
    """The path of the first key or string holding a NUL, or None."""
    if isinstance(value, str):
        return path or "body" if "\x00" in value else None
    if isinstance(value, dict):
        for key, inner in value.items():
            field = f"{path}.{key}" if path else str(key)
            if "\x00" in str(key):
                return field.replace("\x00", "\\u0000")
            found = nul_field(inner, field)
            if found:
                return found
    if isinstance(value, list):
        for index, inner in enumerate(value):
            found = nul_field(inner, f"{path}[{index}]" if path else f"[{index}]")
            if found:
                return found
    return None


class StrictJSONParser(JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):
        data = super().parse(stream, media_type, parser_context)
        field = nul_field(data)
        if field:
            raise ValidationError({field: ["must not contain NUL characters"]})
        return data
