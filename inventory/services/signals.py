"""Signals the lifecycle sends, so that modules above it react without the lifecycle importing
them (imports go one way: tests/repo/test_module_layout.py)."""

from django.dispatch import Signal

# a batch committed whose output is in its sink (it may have replaced earlier outputs); sent
# after the commit's transaction, with batch_id
batch_committed = Signal()
