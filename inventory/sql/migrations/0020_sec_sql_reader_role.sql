-- tidemark_reader: the role Tidemark's own connection takes (SET LOCAL ROLE, inside the reading
-- transaction) to read users' local meta tables, so that the database itself refuses what the
-- own-table check missed (DESIGN.md, invariant 10). It cannot log in and holds no privilege on
-- Tidemark's tables; an operator grants it SELECT on each meta table (docs/security.md):
--     GRANT SELECT ON public.events_meta TO tidemark_reader;
-- Roles belong to the server, not the database: created once, reused by every Tidemark database.
-- Needs a superuser or CREATEROLE.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'tidemark_reader') THEN
        CREATE ROLE tidemark_reader NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT;
    END IF;
END
$$;
-- Tidemark's user may switch to it (and only it)
GRANT tidemark_reader TO CURRENT_USER;
-- nothing of Tidemark's, even if granted by hand before
REVOKE ALL ON ALL TABLES IN SCHEMA public FROM tidemark_reader;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM tidemark_reader;
