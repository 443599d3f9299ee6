"""Approval page (HTTP API, payload 2.0): GET shows the report summary, POST decides. GET never decides.

GET /ops is the read-only operations page (lakepurge.ops.dashboard): requests, deadlines, erasures, index health and
coverage, as counts and request ids only, from the view the hourly RequestMetrics function stored (this function
never reads the index). It needs the operations password (HTTP Basic), or the API's JWT authorizer's token."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs

from aws_lambda_powertools import Logger
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response
from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from lakepurge import runtime
from lakepurge.core import aws
from lakepurge.ops.dashboard import PageLocked, may_read, stored_view
from lakepurge.ops.dashboard_page import operations_page, unavailable_page
from lakepurge.workflow.approval import ApprovalRefused, Requester, decide, pending
from lakepurge.workflow.pages import confirmation_page, decided_page, refused_page
from lakepurge.workflow.store import RequestStore

logger = Logger(service="lakepurge")
app = APIGatewayHttpResolver()

# The secret is in the URL: no caching, no referrer, no framing.
HEADERS = {
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'",
}


def _html(status: int, body: str) -> Response:
    return Response(status_code=status, content_type="text/html; charset=utf-8", body=body, headers=HEADERS)


def _store() -> RequestStore:
    return RequestStore(runtime.settings(), aws.client("s3"), aws.client("kms"))


@app.get("/approval")
def show() -> Response:
    query = app.current_event.query_string_parameters or {}
    try:
        view = pending(
            runtime.settings(),
            _store(),
            aws.client("s3"),
            query.get("request", ""),
            query.get("approver", ""),
            query.get("secret", ""),
        )
    except ApprovalRefused as refused:
        return _html(refused.status, refused_page(str(refused)))
    return _html(200, confirmation_page(view, query.get("approver", ""), query.get("secret", ""), action=""))


@app.post("/approval")
def decide_by_post() -> Response:
    form = {k: v[0] for k, v in parse_qs(app.current_event.decoded_body or "").items()}
    decision = form.get("decision")
    if decision not in ("approve", "reject"):
        return _html(400, refused_page("the form must say approve or reject"))
    store = _store()
    try:
        decided = decide(
            runtime.settings(),
            store,
            aws.client("s3"),
            aws.client("stepfunctions"),
            form.get("request", ""),
            form.get("approver", ""),
            form.get("secret", ""),
            decision,  # type: ignore[arg-type]
            Requester.from_event(app.current_event.raw_event),  # source IP, user agent, JWT subject: decision.json
        )
    except ApprovalRefused as refused:
        return _html(refused.status, refused_page(str(refused)))
    return _html(200, decided_page(decided.record, store.get(form.get("request", "")).kind, decided.repeated))


# What a browser answers with the user name and password prompt.
CHALLENGE = {"WWW-Authenticate": 'Basic realm="lakepurge operations", charset="UTF-8"'}


@app.get("/ops")
def operations() -> Response:
    settings = runtime.settings()
    event = app.current_event
    try:
        allowed = may_read(
            settings, event.headers.get("authorization"), Requester.from_event(event.raw_event).authorized_subject
        )
    except PageLocked as exc:
        logger.error("the operations page is refused to everyone: %s", exc)
        return _html(503, unavailable_page("the operations page has no password configured"))
    if not allowed:
        page = unavailable_page("the operations page needs the operations password")
        return Response(401, "text/html; charset=utf-8", page, headers={**HEADERS, **CHALLENGE})
    view = stored_view(settings, aws.client("s3"))
    if view is None:
        return _html(503, unavailable_page("the operations view is computed hourly by RequestMetrics: not yet"))
    return _html(200, operations_page(view))


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_HTTP, clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
