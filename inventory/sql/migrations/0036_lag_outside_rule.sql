-- One definition of "a job whose lag is counted outside the prefix sums" (schema/prefix_sums.sql),
-- written three times before in queries.sql and dashboard.sql.

-- Whether a job's lag is counted outside the prefix sums, in the tables it reads: a job_output
-- connector's (the upstream job's commits) and a local meta table read in place. A remote meta
-- table (dsn_env) is mirrored into Tidemark's asset table, so it has prefix sums. The one rule,
-- for queries.sql (jobs_lag) and dashboard.sql (job_health, outside_jobs); inlined (SQL, IMMUTABLE).
CREATE OR REPLACE FUNCTION tidemark_lag_outside(p_kind text, p_config jsonb)
RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT p_kind = 'job_output'
           OR (coalesce(p_config ? 'meta_table', false) AND NOT coalesce(p_config ? 'dsn_env', false))
$$;
