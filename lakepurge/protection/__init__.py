"""Pseudonymised datasets: the key vault, the write and read sides, the quasi-identifier check, and crypto-shredding
(erasure by destroying a person's key)."""
