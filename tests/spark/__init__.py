"""The executor side (workers/spark/): readers, processors, sessions, slots, runs; no Celery."""
