"""The PostgreSQL store's LOOKUP rows made into Locations: the pure-Python half of a lookup, apart from the queries."""

from __future__ import annotations

from collections import defaultdict
from functools import partial
from operator import attrgetter

from lakepurge.index.base import Location

BY_PATH = attrgetter("s3path")


def add_locations(rows: list[tuple], objects: dict[int, tuple[str, str]], found: dict[str, list[Location]]) -> None:
    """Turn LOOKUP's rows (per user its object ids and lines; per object its path and ETag) into Locations."""
    for path, ids, lines, etag in rows:
        if lines is None:
            objects[ids[0]] = (path, etag)
    get_object = objects.__getitem__
    one_line = _OneLine()
    for user, ids, lines, _ in rows:
        if lines is None:
            continue
        if len(ids) == 1:
            s3path, etag = get_object(ids[0])
            found[user] = [_location((s3path, etag, one_line[lines[0]]))]
            continue
        if len(set(ids)) == len(ids):  # one line in each object: the usual case
            places = zip(map(get_object, ids), lines, strict=True)
            locations = [_location((s3path, etag, one_line[line])) for (s3path, etag), line in places]
        else:
            by_object: dict[int, list[int]] = defaultdict(list)
            for object_id, line in zip(ids, lines, strict=True):
                by_object[object_id].append(line)
            locations = [
                Location(*get_object(object_id), tuple(sorted(object_lines)))
                for object_id, object_lines in by_object.items()
            ]
        locations.sort(key=BY_PATH)
        found[user] = locations


# A big lookup makes ~5 Locations per user. Built by tuple.__new__ directly (C, no Python frame per Location), and
# with one shared (line,) tuple per line number instead of one per Location: ~25% less time, and half the objects
# for the garbage collector's first pass and for freeing the result.
_location = partial(tuple.__new__, Location)


class _OneLine(dict[int, tuple[int]]):
    def __missing__(self, line: int) -> tuple[int]:
        single = self[line] = (line,)
        return single
