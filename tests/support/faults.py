"""An S3 fault proxy on 127.0.0.1: real HTTP between boto3 and the moto server, with faults injected per request.

boto3 is pointed at the proxy (AWS_ENDPOINT_URL); each request is read whole, matched against a small rule set
(method, a pattern searched in the path, which occurrences of the matching requests) and then either forwarded to
moto and answered, or answered with a fault:

- ``slowdown``: 503 SlowDown, not forwarded (S3's throttling answer);
- ``error500``: 500 InternalError, not forwarded;
- ``reset_before``: the connection is reset (RST) before the request reaches moto;
- ``reset_after``: moto applies the request, then the connection is reset: the client never sees the answer (a PUT
  that S3 applied and whose response was lost);
- ``cut_body``: moto's answer is sent with its full Content-Length but only half its body, then the connection is
  reset (a body read interrupted midway, which botocore does not retry);
- ``slow``: forwarded and answered after ``delay`` seconds;
- ``call``: ``action()`` runs, then the request is forwarded (a PostgreSQL restart at an exact point of a purge);
- ``kill_client``: moto applies the request, then the process that sent it is killed (SIGKILL): an executor lost
  between a write and its answer.

Every fault that fires is recorded (``fired``), so a test can check that its faults happened. Paths are path-style
(boto3 uses them for an IP endpoint): ``/bucket/key``, percent-decoded before matching.
"""

from __future__ import annotations

import http.client
import os
import re
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator, MutableMapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Literal
from urllib.parse import unquote, urlsplit

FaultKind = Literal["slowdown", "error500", "reset_before", "reset_after", "cut_body", "slow", "call", "kill_client"]
FAULT_KINDS: tuple[FaultKind, ...] = ("slowdown", "error500", "reset_before", "reset_after", "cut_body", "slow")

# Headers that belong to one hop, not to the request: never forwarded as they came.
_HOP = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "expect", "content-length", "te"}


@dataclass
class Rule:
    """A fault for the requests that match: method (None: any), a regular expression searched in the decoded path
    (``/bucket/key?query``), and which of the matching requests (1-based occurrences; empty: every one)."""

    kind: FaultKind
    method: str | None = None
    path: str = ""
    nth: Sequence[int] = ()
    delay: float = 1.0  # for "slow"
    action: Callable[[], None] | None = None  # for "call"
    seen: int = field(default=0, init=False)

    def matches(self, method: str, path: str) -> bool:
        return (self.method is None or self.method == method) and re.search(self.path, path) is not None

    def describe(self) -> str:
        which = f" #{','.join(map(str, self.nth))}" if self.nth else " (every)"
        return f"{self.kind} {self.method or '*'} {self.path or '.*'}{which}"


@dataclass(frozen=True)
class Fired:
    rule: str
    method: str
    path: str


class FaultProxy:
    """The proxy in front of ``upstream`` (the moto server's endpoint). ``rules`` may be replaced at any time."""

    def __init__(self, upstream: str) -> None:
        parts = urlsplit(upstream)
        self._upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self._lock = threading.Lock()
        self.rules: list[Rule] = []
        self.fired: list[Fired] = []
        proxy = self

        class Handler(_Relay):
            owner = proxy

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="fault-proxy", daemon=True)
        self._thread.start()

    def set_rules(self, rules: Sequence[Rule]) -> None:
        with self._lock:
            self.rules = list(rules)
            self.fired = []

    def fault_for(self, method: str, path: str) -> Rule | None:
        """The first rule whose occurrence this request is (every matching rule counts the request)."""
        chosen = None
        with self._lock:
            for rule in self.rules:
                if rule.matches(method, path):
                    rule.seen += 1
                    if chosen is None and (not rule.nth or rule.seen in rule.nth):
                        chosen = rule
            if chosen is not None:
                self.fired.append(Fired(chosen.describe(), method, path))
        return chosen

    def fired_kinds(self) -> list[str]:
        with self._lock:
            return [f.rule.split(" ", 1)[0] for f in self.fired]

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    @property
    def upstream(self) -> tuple[str, int]:
        return self._upstream


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """A client that drops a kept-alive connection (or one this proxy reset) is not an error worth a trace."""
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError | OSError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


class _Relay(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, and "100 Continue" for boto3's Expect header
    owner: FaultProxy

    def log_message(self, format: str, *args: object) -> None:
        return None

    def do_GET(self) -> None:
        self._relay()

    do_PUT = do_POST = do_DELETE = do_HEAD = do_GET

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            chunks = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def _relay(self) -> None:
        body = self._body()
        path = unquote(self.path)
        rule = self.owner.fault_for(self.command, path)
        kind = rule.kind if rule is not None else None
        if kind in ("slowdown", "error500"):
            self._error(503 if kind == "slowdown" else 500)
            return
        if kind == "reset_before":
            self._reset()
            return
        if kind == "call" and rule is not None and rule.action is not None:
            rule.action()
        status, reason, headers, answer = self._forward(body)
        if kind == "reset_after":
            self._reset()
            return
        if kind == "kill_client":
            _kill_peer(self.client_address[1])
            self._reset()
            return
        if kind == "slow" and rule is not None:
            time.sleep(rule.delay)
        self.send_response_only(status, reason)
        for name, value in headers:
            self.send_header(name, value)
        if self.command != "HEAD":
            self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        if kind == "cut_body":
            self.wfile.write(answer[: len(answer) // 2])
            self.wfile.flush()
            self._reset()
            return
        if self.command != "HEAD":
            self.wfile.write(answer)

    def _forward(self, body: bytes) -> tuple[int, str, list[tuple[str, str]], bytes]:
        upstream = http.client.HTTPConnection(*self.owner.upstream, timeout=120)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP}
            if body or self.command in ("PUT", "POST"):
                headers["Content-Length"] = str(len(body))
            upstream.request(self.command, self.path, body=body or None, headers=headers)
            response = upstream.getresponse()
            answer = response.read()
            # A HEAD's Content-Length is the object's size: kept; other answers get their body's length.
            own = _HOP - {"content-length"} if self.command == "HEAD" else _HOP
            kept = [(k, v) for k, v in response.getheaders() if k.lower() not in own]
            return response.status, response.reason, kept, answer
        finally:
            upstream.close()

    def _error(self, status: int) -> None:
        code, message = ("SlowDown", "Please reduce your request rate.") if status == 503 else ("InternalError", "")
        if self.headers.get("X-Amz-Target"):  # a JSON protocol (DynamoDB, SQS): its error shape
            answer = f'{{"__type":"{code}","message":"{message}"}}'.encode()
            kind = "application/x-amz-json-1.0"
        else:
            answer = f"<Error><Code>{code}</Code><Message>{message}</Message></Error>".encode()
            kind = "application/xml"
        self.send_response_only(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", "0" if self.command == "HEAD" else str(len(answer)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(answer)

    def _reset(self) -> None:
        """Close with an RST (SO_LINGER 0): the client sees 'connection reset', never an answer."""
        self.close_connection = True
        self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.connection.close()


def _kill_peer(port: int) -> None:
    """SIGKILL the local process whose TCP socket has this port (the client of a proxied request)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:[") and target[8:-1] in inodes:
            pid = int(fd.parts[2])
            if pid != os.getpid():
                os.kill(pid, signal.SIGKILL)
                return


@contextmanager
def endpoint(url: str) -> Iterator[None]:
    """boto3 clients made in this process inside the block talk to ``url`` (lakepurge.core.aws caches one client per
    service: the cache is cleared on the way in and out)."""
    from lakepurge.core import aws

    with swapped(os.environ, "AWS_ENDPOINT_URL", url):
        aws.client.cache_clear()
        try:
            yield
        finally:
            aws.client.cache_clear()


@contextmanager
def swapped(mapping: MutableMapping[str, str], key: str, value: str) -> Iterator[None]:
    """mapping[key] is value inside the block, and what it was (or absent) after it."""
    before = mapping.get(key)
    mapping[key] = value
    try:
        yield
    finally:
        if before is None:
            mapping.pop(key, None)
        else:
            mapping[key] = before
