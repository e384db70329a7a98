"""celery beat and the periodic work it runs; cron schedules."""
