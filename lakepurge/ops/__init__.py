"""What an operator runs and reads: the purge without the workflow, request history, the operations page."""
