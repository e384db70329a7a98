"""What the next batch or backfill covers: budgets, holes, estimates, lag and start bounds."""
