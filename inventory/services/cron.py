"""A job's `schedule_cron`: five fields, each checked by celery's own crontab parser."""

from celery.schedules import crontab

from inventory.services.errors import InvalidInput


def parse_cron(expression: str) -> dict:
    """'m h dom mon dow' -> CrontabSchedule fields; InvalidInput naming schedule_cron otherwise."""
    parts = (expression or "").split()
    if len(parts) != 5:
        raise InvalidInput(
            "schedule_cron",
            f"{expression!r}: expected five fields 'minute hour day-of-month month day-of-week'",
        )
    allowed = set("0123456789*/,-")
    for part in parts:
        if not set(part) <= allowed:
            raise InvalidInput("schedule_cron", f"{expression!r}: {part!r} is not a cron field")
    minute, hour, day_of_month, month_of_year, day_of_week = parts
    try:  # celery's own parser says whether each field is in range ("99" minutes is not)
        crontab(
            minute=minute,
            hour=hour,
            day_of_month=day_of_month,
            month_of_year=month_of_year,
            day_of_week=day_of_week,
        )
    except ValueError as exc:
        raise InvalidInput("schedule_cron", f"{expression!r}: {exc}") from None
    return {
        "minute": minute,
        "hour": hour,
        "day_of_month": day_of_month,
        "month_of_year": month_of_year,
        "day_of_week": day_of_week,
    }
