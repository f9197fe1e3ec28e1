"""Inline SVG drawings for the console: no script, no fetched library, every label escaped."""

from html import escape
from typing import Any
from urllib.parse import quote

_FONT = 'font-family="sans-serif" font-size="11"'


def lineage_graph(graph: dict[str, Any]) -> str:
    """Nodes in columns by distance from the root (sources to the left), edges as lines;
    each artifact links to its page, each node carries `data-id` for tests and scripts."""
    nodes = graph["nodes"]
    up = graph["direction"] == "up"
    columns: dict[int, list[dict[str, Any]]] = {}
    for node in nodes:
        columns.setdefault(node["level"], []).append(node)
    depth = max(columns, default=0)
    box_w, box_h, gap_x, gap_y = 170, 34, 60, 14
    tallest = max((len(c) for c in columns.values()), default=1)
    width = (depth + 1) * (box_w + gap_x) + gap_x
    height = tallest * (box_h + gap_y) + gap_y
    where: dict[str, tuple[float, float]] = {}
    for level, column in columns.items():
        x = gap_x + ((depth - level) if up else level) * (box_w + gap_x)
        for row, node in enumerate(sorted(column, key=lambda n: (n["type"], n["kind"], n["id"]))):
            where[node["id"]] = (float(x), float(gap_y + row * (box_h + gap_y)))
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="lineage" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="lineage graph">'
    ]
    for edge in graph["edges"]:
        (px, py), (cx, cy) = where[edge["parent"]], where[edge["child"]]
        parts.append(
            f'<line x1="{px + box_w}" y1="{py + box_h / 2}" x2="{cx}" y2="{cy + box_h / 2}" '
            'stroke="#889" stroke-width="1.2" marker-end="url(#arrow)"/>'
        )
    parts.insert(
        1,
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" '
        'markerHeight="6" orient="auto"><path d="M0,0 L10,5 L0,10 z" fill="#889"/></marker></defs>',
    )
    for node in nodes:
        nx, ny = where[node["id"]]
        parts.append(_node(node, nx, ny, box_w, box_h, node["id"] == graph["root"]))
    parts.append("</svg>")
    return "".join(parts)


def _node(node: dict[str, Any], x: float, y: float, w: int, h: int, root: bool) -> str:
    is_run = node["type"] == "run"
    fill = "#fdf1dc" if is_run else ("#d8ecff" if not root else "#ffe08a")
    shape = (
        f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="{14 if is_run else 3}" '
        f'fill="{fill}" stroke="#557"/>'
    )
    title = node["id"][:16] if not is_run else node["id"]
    sub = node["kind"] + (f" ({', '.join(node['aliases'])})" if node["aliases"] else "")
    if is_run:
        sub = f"{node['kind']} · {node.get('status', '')}"
    text = (
        f'<text x="{x + 6}" y="{y + 14}" {_FONT}>{escape(title)}</text>'
        f'<text x="{x + 6}" y="{y + 27}" {_FONT} fill="#444">{escape(sub[:30])}</text>'
        f"<title>{escape(node['id'])}</title>"
    )
    body = f'<g class="node {node["type"]}" data-id="{escape(node["id"])}">{shape}{text}</g>'
    if is_run:
        return body
    return f'<a href="/artifacts/{quote(node["id"], safe="")}">{body}</a>'


def line_chart(points: list[list[float]], label: str, width: int = 640, height: int = 220) -> str:
    """A polyline of (x, y) points with its axis ranges written at the corners."""
    if not points:
        return f'<p class="empty">no {escape(label)} recorded</p>'
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    pad = 36

    def at(x: float, y: float) -> str:
        px = pad + (x - x0) / ((x1 - x0) or 1) * (width - 2 * pad)
        py = height - pad - (y - y0) / ((y1 - y0) or 1) * (height - 2 * pad)
        return f"{px:.1f},{py:.1f}"

    line = " ".join(at(x, y) for x, y in points)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" '
        f'height="{height}" role="img" aria-label="{escape(label)}">'
        f'<rect x="{pad}" y="{pad}" width="{width - 2 * pad}" height="{height - 2 * pad}" '
        'fill="none" stroke="#ccd"/>'
        f'<polyline points="{line}" fill="none" stroke="#2a62c9" stroke-width="1.5"/>'
        f'<text x="{pad}" y="{pad - 6}" {_FONT}>{escape(label)}: {y1:.4g}</text>'
        f'<text x="{pad}" y="{height - pad + 14}" {_FONT}>{x0:g}</text>'
        f'<text x="{width - pad}" y="{height - pad + 14}" {_FONT} text-anchor="end">{x1:g}</text>'
        f'<text x="{width - pad}" y="{pad - 6}" {_FONT} text-anchor="end">min {y0:.4g}</text>'
        "</svg>"
    )


def heatmap(data: dict[str, Any], cell: int = 6) -> str:
    """Rows of ranks, columns of steps; darker is slower relative to the slowest cell."""
    ranks, steps, seconds = data["ranks"], data["steps"], data["seconds"]
    if not ranks or not steps:
        return '<p class="empty">no per-rank step times recorded</p>'
    values = [v for row in seconds for v in row if v is not None]
    low, high = min(values), max(values)
    left, top = 52, 18
    h = max(cell * 2, 12)
    width, height = max(460, left + len(steps) * cell + 10), top + len(ranks) * h + 20
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="heatmap" width="{width}" '
        f'height="{height}" role="img" aria-label="per-rank step time heatmap">',
        f'<text x="{left}" y="12" {_FONT}>step time {low:.3g}s (light) to {high:.3g}s (dark), '
        f"steps {steps[0]}-{steps[-1]}</text>",
    ]
    for r, rank in enumerate(ranks):
        y = top + r * h
        parts.append(f'<text x="4" y="{y + h - 3}" {_FONT}>rank {rank}</text>')
        for s, value in enumerate(seconds[r]):
            if value is None:
                continue
            share = (value - low) / ((high - low) or 1)
            shade = int(235 - 200 * share)
            parts.append(
                f'<rect x="{left + s * cell}" y="{y}" width="{cell}" height="{h - 1}" '
                f'fill="rgb(255,{shade},{shade})"><title>rank {rank} step {steps[s]}: '
                f"{value:.4f}s</title></rect>"
            )
    parts.append("</svg>")
    return "".join(parts)


def bars(rows: list[tuple[str, float, str]], width: int = 520) -> str:
    """Horizontal bars: (label, share 0..1, note) each; a funnel or a breakdown."""
    if not rows:
        return '<p class="empty">nothing recorded</p>'
    h, left = 20, 150
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="bars" width="{left + width + 120}" '
        f'height="{len(rows) * h + 6}" role="img">'
    ]
    for i, (label, share, note) in enumerate(rows):
        y = 3 + i * h
        span = max(0.0, min(1.0, share)) * width
        parts.append(
            f'<text x="0" y="{y + 13}" {_FONT}>{escape(label[:24])}</text>'
            f'<rect x="{left}" y="{y}" width="{span:.1f}" height="{h - 4}" fill="#6a9be0"/>'
            f'<text x="{left + span + 4}" y="{y + 13}" {_FONT}>{escape(note)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)
