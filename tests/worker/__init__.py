"""Real Celery worker processes: pipelines end to end, faults, nudges, dispatch, scale-out."""
