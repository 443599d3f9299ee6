"""Settings, AWS clients, exact-version S3 reads and listings, logging, keyed hashes, progress, Spark plumbing."""
