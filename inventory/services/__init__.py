"""Writes of the inventory domain. Views, API, admin and tasks all call these functions."""
