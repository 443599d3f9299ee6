"""What Spark ships to executors, recorded: each task's pickled function (which it may broadcast and spill to an
executor's disk) and the tasks' pickled items (written to a file the JVM reads)."""

from __future__ import annotations

import pytest


def record_shipped(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[bytes]]:
    """{"closures": [...], "items": [...]}, filled as Spark pickles them from now on."""
    from pyspark.serializers import CloudPickleSerializer, CPickleSerializer

    shipped: dict[str, list[bytes]] = {"closures": [], "items": []}

    def recording(serializer: type[CloudPickleSerializer | CPickleSerializer], what: str) -> None:
        dumps = serializer.dumps

        def record(self: object, obj: object) -> bytes:
            pickled: bytes = dumps(self, obj)  # type: ignore[arg-type]
            shipped[what].append(pickled)
            return pickled

        monkeypatch.setattr(serializer, "dumps", record)

    recording(CloudPickleSerializer, "closures")  # pyspark pickles each task's function with it
    recording(CPickleSerializer, "items")  # and parallelize the items
    return shipped
