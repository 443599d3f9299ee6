"""What people read: the approval email and the confirmation page. Counts, dates and request ids only."""

from __future__ import annotations

from html import escape
from typing import Any

from lakepurge.indexing import resolution, unindexable
from lakepurge.protection import shred
from lakepurge.reports import kept
from lakepurge.workflow.approval import ApprovalLink, PendingApproval
from lakepurge.workflow.store import ErasureRequest


def _plan_lines(summary: dict[str, Any], kind: str = "erasure") -> list[str]:
    access = kind == "access"
    lines = [
        f"Users in the request: {summary['users_requested']} ({summary['users_found']} found in the index)",
        f"Objects to read: {summary['objects']}" if access else f"Objects to rewrite: {summary['objects']}",
        f"Records to export: {summary['lines']}" if access else f"Records to erase: {summary['lines']}",
    ]
    for name, counts in sorted(summary["datasets"].items()):
        lines.append(f"  dataset {name}: {counts['records']} record(s) in {counts['objects']} object(s)")
    for name, why in sorted(summary.get("not_searched", {}).items()):
        lines.append(f"  dataset {name}: {why}")  # a gap the approver approves, never a silent one
    totals = summary.get("relational_totals", {})
    for name, rows in sorted(summary["relational_rows"].items()):
        total = totals.get(name)
        share = f" of {total} ({rows / total:.1%})" if total else ""
        lines.append(f"  table {name}: {rows} row(s){share}")
    for name, table in sorted(summary.get("tables", {}).items()):
        lines.append(
            f"  {table['format']} table {name} (version {table['version']}): {table['rows']} row(s) in"
            f" {table['files']} file(s); its history: {table['history_files']} file(s), {table['log_entries']}"
            + (" metadata object(s) naming the users" if table["format"] == "iceberg" else " log entr(y/ies)")
        )
        if not access:  # what the erasure does to the table's history, before anyone approves
            lines.append(f"    {table['time_travel']}")
    shredded = [] if access else shred.plan_lines(summary.get("crypto_shred"))
    identifiers = resolution.plan_lines(summary.get("identifiers"))
    return lines + unindexable.plan_lines(summary.get("unindexable", {})) + shredded + identifiers


def approval_email(
    request: ErasureRequest, summary: dict[str, Any], link: ApprovalLink, expires_at: str
) -> tuple[str, str]:
    """(subject, text body) of one approver's email; an access request's says what will be exported."""
    access = request.kind == "access"
    what = "access export" if access else "erasure"
    subject = f"lakepurge: approve {what} request {request.request_id} (due {request.deadline[:10]})"
    outcome = (
        "nothing is exported and the privacy team is notified."
        if access
        else "the request is not erased and the privacy team is notified."
    )
    scope = (
        [
            "Approving exports a copy of exactly these records into one encrypted archive for the privacy team;",
            "the lake is only read.",
            "",
        ]
        if access
        else []
    )
    body = "\n".join(
        [
            f"{what.capitalize()} request {request.request_id}, received {request.received_at}, legal deadline"
            f" {request.deadline} ({request.days_left()} days left).",
            "",
            *_plan_lines(summary, request.kind),
            *(
                ["Exemptions from erasure:", *kept.plan_lines(summary["exemptions"])]
                if summary.get("exemptions")
                else []
            ),
            "",
            *scope,
            "Review the report and approve or reject it here (the link is yours alone and works once):",
            link.url,
            "",
            f"The link expires at {expires_at}; without a decision by then {outcome}",
        ]
    )
    return subject, body


_STYLE = (
    "body{font-family:sans-serif;max-width:40em;margin:2em auto;line-height:1.4}"
    "button{font-size:1.1em;padding:.4em 1.2em;margin-right:1em}"
    ".approve{background:#b00020;color:#fff}.note{color:#555}"
)


def _page(title: str, body: str) -> str:
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body><h1>{escape(title)}</h1>{body}</body></html>"
    )


def confirmation_page(view: PendingApproval, approver_index: str, secret: str, action: str) -> str:
    """The report summary and two forms that POST the decision."""
    summary = view.report.summary()
    access = view.request.kind == "access"
    items = "".join(f"<li>{escape(line.strip())}</li>" for line in _plan_lines(summary, view.request.kind))
    button = "Approve access export" if access else "Approve erasure"
    effect = (
        "approving exports exactly the records of this report" if access else "approving erases exactly this report"
    )
    hidden = (
        f"<input type='hidden' name='request' value='{escape(view.request.request_id)}'>"
        f"<input type='hidden' name='approver' value='{escape(approver_index)}'>"
        f"<input type='hidden' name='secret' value='{escape(secret)}'>"
    )
    forms = (
        f"<form method='post' action='{escape(action)}' style='display:inline'>{hidden}"
        "<input type='hidden' name='decision' value='approve'>"
        f"<button class='approve' id='approve' type='submit'>{button}</button></form>"
        f"<form method='post' action='{escape(action)}' style='display:inline'>{hidden}"
        "<input type='hidden' name='decision' value='reject'>"
        "<button id='reject' type='submit'>Reject</button></form>"
    )
    body = (
        f"<p>Request <b>{escape(view.request.request_id)}</b>, received {escape(view.request.received_at)}; "
        f"legal deadline <b>{escape(view.request.deadline)}</b> ({view.request.days_left()} days left).</p>"
        f"<ul>{items}</ul>{_unindexable_objects(view)}{_kept_datasets(view)}"
        f"<p class='note'>Report SHA-256 <code>{escape(view.report_sha256)}</code>: {effect}. "
        f"Signed in as {escape(view.approver)}; this link expires at {escape(view.expires_at)}.</p>"
        f"{forms}"
    )
    return _page("Approve an access export request" if access else "Approve an erasure request", body)


def _unindexable_objects(view: PendingApproval) -> str:
    """The objects holding unindexable lines, per dataset (as the report names them; line numbers, never content):
    lines lakepurge cannot locate and does not erase, read for the requested users before this page was sent."""
    rows = [
        f"<li>dataset {escape(s['dataset'])}: {escape(o['object'])}, {o['count']} line(s)"
        + (
            f" ({', '.join(map(str, o['lines']))}{', ...' if o['count'] > len(o['lines']) else ''})"
            if o["lines"]
            else ""
        )
        + "</li>"
        for s in view.report.unindexable
        for o in s["listed"]
    ]
    if not rows:
        return ""
    return (
        "<p class='note'>Unindexable lines (lakepurge cannot locate their records and does not erase them; each was"
        f" read for the requested users' ids):</p><ul id='unindexable'>{''.join(rows)}</ul>"
    )


def _kept_datasets(view: PendingApproval) -> str:
    """The datasets this erasure keeps ([[exemptions]]) and why, or whose exemption has ended, as their own section:
    the approver approves keeping them as much as erasing the rest."""
    rows = "".join(f"<li>{escape(line.strip())}</li>" for line in kept.plan_lines(view.report.exemptions))
    if not rows:
        return ""
    return f"<h2>Exemptions from erasure</h2><ul id='kept'>{rows}</ul>"


def decided_page(record: dict[str, Any], kind: str = "erasure", repeated: bool = False) -> str:
    """The decision as recorded; ``repeated``: this POST repeated it (a double click), so the page says it stands."""
    if kind == "access" and record["decision"] == "approved":
        text = "Approved: the access export starts now. The privacy team is notified when the archive is ready."
    elif kind == "access":
        text = "Rejected: nothing will be exported. The privacy team is notified."
    elif record["decision"] == "approved":
        text = "Approved: the erasure starts now. The privacy team is notified when it is verified."
    else:
        text = "Rejected: nothing will be erased. The privacy team is notified."
    if repeated:
        text = f"This request was already {record['decision']} at {record['decided_at']}: the decision stands."
    return _page(f"Request {record['decision']}", f"<p id='outcome'>{escape(text)}</p>")


def refused_page(message: str) -> str:
    return _page("Nothing was decided", f"<p id='outcome'>{escape(message)}</p>")
