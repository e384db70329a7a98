-- A connector's last asset below an id and a job's lag are one row each: said to the planner
-- (schema/prefix_sums.sql). Called where they are not inlined, each was planned as 1,000 rows; the
-- /metrics statement at 10,000 jobs, estimated at 10^10 rows, read its jobs by name to avoid a
-- sort and joined each one to every job's open batches by a nested loop (9.7 s; 0.5 s now).

ALTER FUNCTION tidemark_asset_before(bigint, bigint) ROWS 1;
ALTER FUNCTION tidemark_lag(bigint, bigint) ROWS 1;
