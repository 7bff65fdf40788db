#!/usr/bin/env python3
"""Renders a restore's Chrome-trace JSON (RestoreTrace.writeChromeTrace) as an SVG timeline for the docs.

Usage: scripts/trace-svg.py TRACE.json OUT.svg [title]
One row per track (host, restore stream, compute stream); spans as bars, instants (waits, request, response) as
ticks. Standard library only.
"""
import json
import sys
from xml.sax.saxutils import escape


def main():
    src, out = sys.argv[1], sys.argv[2]
    title = sys.argv[3] if len(sys.argv) > 3 else "on-demand restore"
    events = json.load(open(src))["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M"}
    spans = [e for e in events if e.get("ph") == "X"]
    marks = [e for e in events if e.get("ph") == "i"]
    t0 = min([e["ts"] for e in spans + marks] + [0])
    t1 = max([e["ts"] + e.get("dur", 0) for e in spans] + [e["ts"] for e in marks])
    width, left, row, top = 1200, 260, 46, 40
    scale = (width - left - 20) / max(t1 - t0, 1)
    tracks = sorted(names)
    height = top + row * len(tracks) + 40
    colors = {1: "#7f7f7f", 2: "#1f77b4", 3: "#ff7f0e"}
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
           f'font-size="12">', f'<text x="10" y="20" font-size="14">{escape(title)}</text>']
    for i, tid in enumerate(tracks):
        y = top + i * row
        svg.append(f'<text x="10" y="{y + 22}">{escape(names[tid])}</text>')
        svg.append(f'<line x1="{left}" y1="{y + row - 6}" x2="{width - 20}" y2="{y + row - 6}" stroke="#ddd"/>')
        for e in spans:
            if e["tid"] != tid:
                continue
            x = left + (e["ts"] - t0) * scale
            w = max(e.get("dur", 0) * scale, 0.5)
            svg.append(f'<rect x="{x:.2f}" y="{y + 8}" width="{w:.2f}" height="{row - 18}" fill="{colors.get(tid, "#2ca02c")}"'
                       f' fill-opacity="0.75"><title>{escape(e["name"])}: {e.get("dur", 0):.1f} us</title></rect>')
        for e in marks:
            if e["tid"] != tid:
                continue
            x = left + (e["ts"] - t0) * scale
            svg.append(f'<line x1="{x:.2f}" y1="{y + 4}" x2="{x:.2f}" y2="{y + row - 6}" stroke="#d62728"><title>'
                       f'{escape(e["name"])}</title></line>')
    ms = (t1 - t0) / 1000
    step = max(1, round(ms / 10))
    for k in range(0, int(ms) + 1, step):
        x = left + (k * 1000) * scale
        svg.append(f'<text x="{x:.1f}" y="{height - 12}" text-anchor="middle">{k} ms</text>')
    svg.append("</svg>")
    open(out, "w").write("\n".join(svg))


if __name__ == "__main__":
    main()
