"""Reading records out of bytes: JSON Lines, CSV, Parquet, gzip; the id scans verification uses."""
