"""The operations page: the queue, deadlines, erasures over time, index health and coverage, as one HTML page.

Rendered server-side from :class:`lakepurge.ops.dashboard.OperationsView`; the charts are inline SVG (no script, no
external resource: the approval page's Content-Security-Policy holds). Request ids, states, dates and counts only.
"""

from __future__ import annotations

from html import escape

from lakepurge.ops.dashboard import ErasedDay, OperationsView

TITLE = "lakepurge operations"

_STYLE = (
    "body{font-family:sans-serif;max-width:60em;margin:1.5em auto;line-height:1.4;color:#222}"
    "table{border-collapse:collapse;margin:.5em 0 1.5em}td,th{border-bottom:1px solid #ddd;padding:.2em .6em;"
    "text-align:left}th{background:#f3f3f3}.num{text-align:right}.overdue{background:#fde2e4;font-weight:bold}"
    ".bad{color:#b00020;font-weight:bold}.ok{color:#1b5e20}.tiles{display:flex;gap:1em;flex-wrap:wrap}"
    ".tile{border:1px solid #ccc;border-radius:4px;padding:.5em 1em;min-width:8em}"
    ".tile b{display:block;font-size:1.6em}.note{color:#555;font-size:.9em}"
)


def _tile(ident: str, label: str, value: int, alert: bool = False) -> str:
    cls = " bad" if alert and value else ""
    return f"<div class='tile'><b id='{ident}' class='{cls.strip()}'>{value}</b>{escape(label)}</div>"


def bar_chart(ident: str, bars: list[tuple[str, int]], colour: str = "#1565c0") -> str:
    """A horizontal bar chart as inline SVG: one labelled bar per (label, value)."""
    if not bars:
        return "<p class='note'>nothing yet</p>"
    top = max(value for _, value in bars) or 1
    row, label_width, width = 22, 170, 360
    parts = [
        f"<svg id='{ident}' role='img' width='{label_width + width + 60}' height='{row * len(bars) + 4}'"
        f" xmlns='http://www.w3.org/2000/svg'>"
    ]
    for i, (label, value) in enumerate(bars):
        y = i * row + 2
        length = round(width * value / top)
        parts.append(
            f"<text x='0' y='{y + 15}' font-size='13'>{escape(label)}</text>"
            f"<rect x='{label_width}' y='{y + 3}' width='{length}' height='{row - 6}' fill='{colour}'>"
            f"<title>{escape(label)}: {value}</title></rect>"
            f"<text x='{label_width + length + 4}' y='{y + 15}' font-size='13'>{value}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _erased_chart(days: tuple[ErasedDay, ...]) -> str:
    return bar_chart("erased-chart", [(f"{d.day} ({d.objects} obj.)", d.lines) for d in days], "#2e7d32")


def _requests_table(view: OperationsView) -> str:
    head = (
        "<tr><th>request</th><th>kind</th><th>state</th><th>received</th><th>deadline</th>"
        "<th class='num'>days left</th><th class='num'>users</th><th class='num'>objects</th>"
        "<th class='num'>lines erased</th></tr>"
    )
    rows = []
    for r in view.requests:
        cls = " class='overdue'" if r.overdue else ""
        days = "" if r.days_left is None else f"{r.days_left:+d}"
        flag = " OVERDUE" if r.overdue else ""
        rows.append(
            f"<tr{cls} data-request='{escape(r.request_id)}'><td>{escape(r.request_id)}</td><td>{escape(r.kind)}</td>"
            f"<td>{escape(r.state)}{flag}</td><td>{escape(r.created_at[:16])}</td>"
            f"<td>{escape((r.deadline or '')[:10])}</td><td class='num'>{days}</td>"
            f"<td class='num'>{'' if r.users is None else r.users}</td>"
            f"<td class='num'>{'' if r.objects is None else r.objects}</td>"
            f"<td class='num'>{'' if r.lines_erased is None else r.lines_erased}</td></tr>"
        )
    return f"<table id='requests'>{head}{''.join(rows)}</table>"


def _coverage_table(view: OperationsView) -> str:
    head = "<tr><th>dataset</th><th>coverage</th><th>indexed</th><th class='num'>objects</th></tr>"
    rows = []
    for d in view.coverage:
        state = "<span class='ok'>covered</span>" if d.complete else f"<span class='bad'>{escape(d.reason)}</span>"
        when = f"{escape(d.method or '')} {escape((d.indexed_at or '')[:16])}"
        rows.append(
            f"<tr><td>{escape(d.dataset)}</td><td>{state}</td><td>{when}</td><td class='num'>{d.objects}</td></tr>"
        )
    return f"<table id='coverage'>{head}{''.join(rows)}</table>"


def operations_page(view: OperationsView) -> str:
    tiles = "".join(
        [
            _tile("open-count", "open requests", view.open),
            _tile("overdue-count", "overdue", view.overdue, alert=True),
            _tile("lines-erased", "lines erased", view.lines_erased),
            _tile("objects-erased", "objects erased", view.objects_erased),
            _tile("unindexable-count", "unindexable lines", view.unindexable_lines, alert=True),
            _tile("returning-count", "returning users", view.returning_users, alert=True),
        ]
    )
    body = (
        f"<p class='note'>Generated {escape(view.generated_at)} by the hourly RequestMetrics function. Read-only:"
        " request ids, states and counts; no user"
        " id is shown here (`lakepurge status` lists the returning users by keyed hash and the unindexable lines by"
        " object).</p>"
        f"<div class='tiles'>{tiles}</div>"
        "<h2>Requests by state</h2>"
        + bar_chart("state-chart", list(view.by_state.items()))
        + "<h2>Deadlines</h2><p class='note'>Overdue first, then open requests by deadline, then ended ones."
        + (
            f" <span id='plans'>{view.plans} dry run(s) never executed (plans: nothing erased) are not listed"
            " (`lakepurge requests --all`).</span>"
            if view.plans
            else ""
        )
        + "</p>"
        + _requests_table(view)
        + f"<h2>Erased over time</h2><p class='note'>Lines erased by verified requests, by day received:"
        f" {view.lines_erased} line(s) in {view.objects_erased} object(s).</p>"
        + _erased_chart(view.erased)
        + "<h2>Index</h2>"
        f"<p>{view.index_objects} object(s), {view.index_records} record(s), {view.index_users} user(s).<br>"
        f"Unindexable lines: {view.unindexable_lines} in {view.objects_with_unindexable} object(s).<br>"
        f"Returning users (erased, found again): {view.returning_users} in {view.objects_with_returning}"
        " object(s).</p>"
        f"<h2>Coverage</h2><p class='note'>{view.datasets_covered} of {len(view.coverage)} dataset(s) covered.</p>"
        + _coverage_table(view)
    )
    return _document(body)


def unavailable_page(message: str) -> str:
    """What the page answers when it is not shown (no password given, none configured, no view stored yet)."""
    return _document(f"<p id='outcome'>{escape(message)}</p>")


def _document(body: str) -> str:
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{TITLE}</title>"
        f"<style>{_STYLE}</style></head><body><h1>{TITLE}</h1>{body}</body></html>"
    )
