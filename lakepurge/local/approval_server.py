"""The approval page on 127.0.0.1: what API Gateway's HTTP API does on AWS, locally.

Each browser request becomes an HTTP API (payload 2.0) event for ``lakepurge_lambdas.approval_api.handler`` and
its response is written back, so the page a person clicks locally runs the same handler as the deployed one.
"""

from __future__ import annotations

import base64
import errno
import threading
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from lakepurge.core.logs import get_logger
from lakepurge.local.workflow import LocalContext, handler

log = get_logger()

PATH = "/approval"
OPS_PATH = "/ops"  # the read-only operations page, served by the same handler


class PortInUse(RuntimeError):
    pass


def http_api_event(method: str, target: str, headers: dict[str, str], body: bytes, source_ip: str) -> dict[str, Any]:
    url = urlsplit(target)
    now = datetime.now(UTC)
    return {
        "version": "2.0",
        "routeKey": f"{method} {url.path}",
        "rawPath": url.path,
        "rawQueryString": url.query,
        "cookies": [],
        "headers": {k.lower(): v for k, v in headers.items()},
        "queryStringParameters": dict(parse_qsl(url.query)) or None,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "local",
            "domainName": headers.get("Host", "127.0.0.1"),
            "http": {
                "method": method,
                "path": url.path,
                "protocol": "HTTP/1.1",
                "sourceIp": source_ip,
                "userAgent": headers.get("User-Agent", ""),
            },
            "requestId": str(uuid.uuid4()),
            "routeKey": f"{method} {url.path}",
            "stage": "$default",
            "time": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": int(now.timestamp() * 1000),
        },
        "body": base64.b64encode(body).decode() if body else None,
        "isBase64Encoded": bool(body),
    }


class _Handler(BaseHTTPRequestHandler):
    def _serve(self, method: str) -> None:
        approval_api = handler("lakepurge-approval-api")
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        event = http_api_event(method, self.path, dict(self.headers.items()), body, self.client_address[0])
        context = LocalContext("lakepurge-approval-api", event["requestContext"]["requestId"])
        try:
            response = approval_api(event, context)
        except Exception:  # what API Gateway answers for a function that raised
            log.warning("the approval API raised", exc_info=True)
            response = {"statusCode": 500, "body": '{"message":"Internal Server Error"}'}
        payload = response.get("body") or ""
        data = base64.b64decode(payload) if response.get("isBase64Encoded") else payload.encode()
        self.send_response(int(response["statusCode"]))
        for name, value in (response.get("headers") or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def log_message(self, format: str, *args: Any) -> None:
        pass  # request lines carry the one-time secret: never logged


class ApprovalServer:
    def __init__(self, port: int = 0) -> None:
        try:
            self._server = ThreadingHTTPServer(("127.0.0.1", port), _Handler)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise PortInUse(
                    f"port {port} on 127.0.0.1 is in use: stop what holds it or choose another port"
                ) from None
            raise
        self._thread = threading.Thread(target=self._server.serve_forever, name="approval-page", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        port = self._server.server_address[1]
        return f"http://127.0.0.1:{port}{PATH}"

    @property
    def ops_url(self) -> str:
        port = self._server.server_address[1]
        return f"http://127.0.0.1:{port}{OPS_PATH}"

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
