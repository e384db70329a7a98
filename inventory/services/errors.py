"""Errors the services raise; the API maps them to 400 / 404 / 409."""


class TidemarkError(Exception):
    """Base of every domain error."""


class InvalidInput(TidemarkError):
    """Bad input: names the field and the reason."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class NotFound(TidemarkError):
    """An object named in the request does not exist."""


class Conflict(TidemarkError):
    """The request is valid but the object's state does not allow it."""


class StaleAttempt(Conflict):
    """A worker tried to act on a batch attempt it no longer owns (fencing, invariant 8)."""


class PlanChanged(Conflict):
    """A backfill's plan is no longer the one that was previewed; `plan` is the plan as it is now."""

    def __init__(self, message: str, plan: dict):
        super().__init__(message)
        self.plan = plan
