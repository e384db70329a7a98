-- The allowed moves of a batch's and of a backfill's status: (from_status, to_status), where
-- from_status 'new' is a row's birth. The one definition, beside the transitions that apply it
-- (transitions.sql) and mirrored by inventory/models/moves.py (tests/sql/test_status_transitions.py
-- keeps the two equal).
--
-- The transition functions probe the tables tidemark_batch_move and tidemark_backfill_move (their
-- primary key, inside the statement that moves: the hot paths send no query of their own for the
-- check). Those tables hold exactly the rows these functions return: a change file that changes a
-- list here refills its table from the function (as 0047_moves_in_schema.sql does), and the test
-- compares each table with its function.

CREATE OR REPLACE FUNCTION tidemark_batch_moves()
RETURNS TABLE (from_status text, to_status text)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    VALUES
        ('new', 'queued'), ('new', 'running'), ('new', 'skipped'),
        ('queued', 'running'), ('queued', 'cancelled'), ('queued', 'superseded'),
        ('running', 'succeeded'), ('running', 'failed'), ('running', 'dead'),
        ('running', 'cancelled'),
        ('failed', 'queued'), ('failed', 'running'), ('failed', 'cancelled'),
        ('failed', 'superseded'),
        ('dead', 'queued'), ('dead', 'skipped'), ('dead', 'superseded'),
        ('succeeded', 'superseded'),
        ('skipped', 'superseded')
$$;

CREATE OR REPLACE FUNCTION tidemark_backfill_moves()
RETURNS TABLE (from_status text, to_status text)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    VALUES
        ('new', 'running'),
        ('running', 'paused'), ('paused', 'running'),
        ('running', 'cancelled'), ('paused', 'cancelled'),
        ('running', 'completed')
$$;
