#!/usr/bin/env python3
"""Draws docs/benchmarks.svg: time to Ready against the number of agents (log-log), for the
controllers and for the floor. Usage: scripts/bench-chart.py N:CONTROLLER_S:FLOOR_S ..."""

import math
import sys
from pathlib import Path

points = [tuple(float(x) for x in arg.split(":")) for arg in sys.argv[1:]]
W, H, L, B, T, R = 640, 400, 70, 50, 30, 150
xs = [math.log10(p[0]) for p in points]
ys = [math.log10(v) for p in points for v in p[1:]]
x0, x1 = math.floor(min(xs)), math.ceil(max(xs))
y0, y1 = math.floor(min(ys)), math.ceil(max(ys))
px = lambda v: L + (math.log10(v) - x0) / (x1 - x0) * (W - L - R)
py = lambda v: H - B - (math.log10(v) - y0) / (y1 - y0) * (H - B - T)
svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
       f'<rect width="{W}" height="{H}" fill="white"/>',
       f'<text x="{W / 2 - 60}" y="18" font-size="14">Time until every resource is Ready</text>']
for e in range(x0, x1 + 1):
    x = px(10 ** e)
    svg.append(f'<line x1="{x}" y1="{T}" x2="{x}" y2="{H - B}" stroke="#ddd"/><text x="{x - 12}" y="{H - B + 18}">{10 ** e:g}</text>')
for e in range(y0, y1 + 1):
    y = py(10 ** e)
    svg.append(f'<line x1="{L}" y1="{y}" x2="{W - R}" y2="{y}" stroke="#ddd"/><text x="{L - 45}" y="{y + 4}">{10 ** e:g} s</text>')
svg.append(f'<text x="{(W - R) / 2}" y="{H - 12}">agents</text>')
for index, (name, color) in enumerate([("controllers", "#1f77b4"), ("floor (bare client)", "#ff7f0e")]):
    coords = [(px(p[0]), py(p[1 + index])) for p in points]
    svg.append('<polyline fill="none" stroke-width="2" stroke="%s" points="%s"/>' % (color, " ".join(f"{x},{y}" for x, y in coords)))
    svg.extend(f'<circle cx="{x}" cy="{y}" r="4" fill="{color}"/>' for x, y in coords)
    svg.append(f'<rect x="{W - R + 15}" y="{T + 20 * index}" width="12" height="12" fill="{color}"/><text x="{W - R + 32}" y="{T + 10 + 20 * index}">{name}</text>')
svg.append("</svg>")
Path(__file__).resolve().parents[1].joinpath("docs", "benchmarks.svg").write_text("\n".join(svg) + "\n")
print("wrote docs/benchmarks.svg")
