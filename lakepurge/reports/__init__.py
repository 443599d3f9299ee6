"""The purge report and the evidence bucket's layout (every stored document's path and model)."""
