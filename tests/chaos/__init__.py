"""Faults injected into running workers, Redis and PostgreSQL with real Spark (marker `chaos`):
`make chaos` runs them alone, `make test` leaves them out."""
