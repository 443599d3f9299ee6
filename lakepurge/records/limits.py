"""How much of one object lakepurge holds in memory at a time."""

from __future__ import annotations

# Up to this size (decompressed) an object is held whole in memory: a CSV object rewritten, a JSON Lines object
# verified, a rewritten object staged before its write, an access export's archive; past it, it is streamed record by
# record or spooled to a temporary file. One figure, so that a task's memory has one bound (docs/LIMITS.md).
IN_MEMORY_BYTES = 64 * 1024 * 1024
