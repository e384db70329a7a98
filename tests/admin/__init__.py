"""The Django admin as the operations tool."""
