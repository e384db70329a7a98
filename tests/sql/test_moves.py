"""The allowed status moves are defined once in SQL (inventory/sql/schema/moves.sql), mirrored by
Python (inventory/models/moves.py); the move tables the transitions probe hold exactly those rows.
No status is dead: each one a batch or backfill can have is entered by some move."""

import pytest
from django.db import connection

from inventory.models import BackfillStatus, BatchStatus
from inventory.models.moves import BACKFILL_MOVES, BATCH_MOVES, NEW

pytestmark = pytest.mark.django_db

MOVES = {
    "batch": (BATCH_MOVES, BatchStatus),
    "backfill": (BACKFILL_MOVES, BackfillStatus),
}


def _rows(sql: str) -> set[tuple[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        return {tuple(row) for row in cursor.fetchall()}


@pytest.mark.parametrize("kind", sorted(MOVES))
def test_the_move_table_the_function_and_python_list_the_same_moves(kind):
    in_python, _ = MOVES[kind]
    in_function = _rows(f"SELECT from_status, to_status FROM tidemark_{kind}_moves()")
    in_table = _rows(f"SELECT from_status, to_status FROM tidemark_{kind}_move")
    assert in_function == set(in_python)
    assert in_table == in_function


@pytest.mark.parametrize("kind", sorted(MOVES))
def test_every_status_is_entered_by_a_move_and_every_move_names_real_statuses(kind):
    moves, statuses = MOVES[kind]
    assert {status for move in moves for status in move} <= {NEW, *statuses.values}
    entered = {to for _, to in moves}
    assert entered == set(statuses.values), "a status no move enters is dead: remove it"


def test_a_backfill_is_never_pending():
    assert "pending" not in BackfillStatus.values
    assert not [move for move in BACKFILL_MOVES if "pending" in move]
