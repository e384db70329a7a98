"""How a service call made of one SQL statement (a function of inventory/sql/schema) runs."""

from contextlib import nullcontext

from django.db import connection, transaction


def single_call():
    """Outside a transaction the call is its own transaction (one round trip: no BEGIN and
    COMMIT sent apart from it); inside a caller's transaction it runs in a savepoint, so a
    refusal leaves that transaction usable, and what it locks stays locked until that commits."""
    return transaction.atomic() if connection.in_atomic_block else nullcontext()
