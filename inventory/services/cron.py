"""A job's `schedule_cron`: five fields, read by celery's own crontab, which must be able to say
when it fires next.

Celery's parser accepts each field on its own, so `0 0 31 2 *` (February 31st) passes it; beat
then asks the crontab when it is due, celery gives up (RuntimeError: unable to rollover) and the
whole beat process exits. A cron is therefore accepted only when celery's own computation (the
one beat runs: `crontab.remaining_delta`) finds a next run within HORIZON of now; the same check
lets the schedule sync skip a row stored before this rule (`scheduling.schedules_sync`).
"""

from datetime import UTC, datetime, timedelta

from celery.schedules import crontab

from inventory.services.errors import InvalidInput

# a cron that does not fire within this many years is refused. Any date that exists comes
# sooner: February 29th on one weekday, the rarest, recurs within 40 years (around 2100, which
# is no leap year); so only a date no month in the cron has is refused.
HORIZON_YEARS = 50
_HORIZON = timedelta(days=366 * HORIZON_YEARS)


def _schedule(fields: dict, now: datetime) -> crontab:
    return crontab(**fields, nowfun=lambda: now)


def next_run(fields: dict, after: datetime) -> datetime:
    """When celery's crontab of `fields` fires next after `after` (UTC), by the computation beat
    runs; any error of celery's is raised as it is."""
    schedule = _schedule(fields, after)
    start, delta, _now = schedule.remaining_delta(after)
    return start + delta


def parse_cron(expression: str, *, now: datetime | None = None) -> dict:
    """'m h dom mon dow' -> CrontabSchedule fields; InvalidInput naming schedule_cron otherwise:
    not five fields, a field celery refuses, or no run celery can compute within HORIZON_YEARS."""
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
    fields = {
        "minute": minute,
        "hour": hour,
        "day_of_month": day_of_month,
        "month_of_year": month_of_year,
        "day_of_week": day_of_week,
    }
    try:  # celery's own parser says whether each field is in range ("99" minutes is not)
        crontab(**fields)
    except ValueError as exc:
        raise InvalidInput("schedule_cron", f"{expression!r}: {exc}") from None
    now = now or datetime.now(UTC)
    try:
        following = next_run(fields, now)
    except Exception:  # celery cannot compute it: beat would die on it (RuntimeError, ...)
        following = None
    if following is None or following - now > _HORIZON:
        raise InvalidInput(
            "schedule_cron",
            f"{expression!r} never fires within the next {HORIZON_YEARS} years (a day that no "
            "month in it has, such as 31 in February or April?); celery beat could not "
            "schedule it. Day of month and day of week must both match.",
        )
    return fields
