"""The integer ranges of the PostgreSQL columns input is stored in (smallint, integer, bigint):
every entry point (the API's serializers, the dashboard's forms) bounds a number by its column's,
so a value the database cannot hold is a refusal naming the field, never the database's error."""

BIGINT = 2**63 - 1
INT = 2**31 - 1
SMALLINT = 2**15 - 1
