-- 0018: tidemark_refuse, a planner stopped with the source's own message

-- Stop a planner with the source's own message (a job_output's expired commit): an item query is
-- plain SQL, which has no RAISE. SQLSTATE TM422: the source cannot be read as configured.
CREATE OR REPLACE FUNCTION tidemark_refuse(p_message text)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '%', p_message USING ERRCODE = 'TM422';
END
$$;
