-- 0047: the move lists live in schema/moves.sql (tidemark_batch_moves, tidemark_backfill_moves);
-- the move tables the transitions probe hold exactly their rows. The backfill status 'pending'
-- goes: no backfill is ever born in it (tidemark_backfill_transition births 'new' -> 'running'),
-- so its one move, pending -> cancelled, leaves the table.

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

DELETE FROM tidemark_batch_move
WHERE (from_status, to_status) NOT IN (SELECT * FROM tidemark_batch_moves());
INSERT INTO tidemark_batch_move (from_status, to_status)
SELECT * FROM tidemark_batch_moves() ON CONFLICT DO NOTHING;

DELETE FROM tidemark_backfill_move
WHERE (from_status, to_status) NOT IN (SELECT * FROM tidemark_backfill_moves());
INSERT INTO tidemark_backfill_move (from_status, to_status)
SELECT * FROM tidemark_backfill_moves() ON CONFLICT DO NOTHING;
