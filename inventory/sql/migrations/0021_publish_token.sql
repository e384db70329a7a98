-- 0021: tidemark_publish_token, a number per publish in publish order (the Delta sink's txn version)

CREATE SEQUENCE IF NOT EXISTS tidemark_publish_seq;

-- A number that grows with every publish, drawn inside the fence after tidemark_publish_begin
-- (so, per job, in publish order): the Delta sink's application-transaction version, which lets
-- the Delta log itself refuse an older publish that arrives late (docs/sinks/delta.md).
CREATE OR REPLACE FUNCTION tidemark_publish_token()
RETURNS bigint LANGUAGE sql AS $$
    SELECT nextval('tidemark_publish_seq');
$$;
