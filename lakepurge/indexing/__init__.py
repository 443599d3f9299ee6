"""Keeping the index current (S3 events, backfill, reconcile) and knowing how far it can be trusted."""
