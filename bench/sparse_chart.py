#!/usr/bin/env python3
"""Chart of a bench/sparse_scale run: formation time, connections and memory
per rank, 8-byte allreduce and barrier latency against the world size, one
line per topology. Plain SVG, no plotting library needed.

usage: bench/sparse_chart.py scale.txt out.svg
"""
import re
import sys

LINE = re.compile(
    r"^(\S+)\s+n=\s*(\d+)\s+form\s+([\d.]+) ms\s+conns/rank\s+(\d+)\s+mem/rank\s+([\d.]+) MiB"
    r"\s+allreduce 8B\s+([\d.]+) ms\s+barrier\s+([\d.]+) ms\s+allreduce 1MiB\s+([\d.]+) ms")
PANELS = [("formation (ms)", 2), ("connections per rank", 3), ("memory per rank (MiB)", 4),
          ("allreduce 8 B (ms)", 5), ("barrier (ms)", 6), ("allreduce 1 MiB (ms)", 7)]
COLORS = {"full_mesh": "#d62728", "hypercube": "#1f77b4", "k_regular:4": "#2ca02c"}


def main():
    rows = []
    for line in open(sys.argv[1]):
        m = LINE.match(line.strip())
        if m:
            g = m.groups()
            rows.append((g[0], int(g[1])) + tuple(float(x) for x in g[2:]))
    topos = sorted({r[0] for r in rows})
    ns = sorted({r[1] for r in rows})
    W, H, PW, PH = 1050, 640, 300, 230
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" '
           'font-family="sans-serif" font-size="11">' % (W, H),
           '<rect width="100%" height="100%" fill="white"/>']
    for i, (title, col) in enumerate(PANELS):
        x0, y0 = 50 + (i % 3) * (PW + 45), 30 + (i // 3) * (PH + 70)
        vals = [r[col] for r in rows] or [1]
        top = max(vals) * 1.1 or 1
        out.append('<text x="%d" y="%d" font-weight="bold">%s</text>' % (x0, y0 - 8, title))
        out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#999"/>'
                   % (x0, y0, PW, PH))
        for k in range(5):
            v = top * k / 4
            y = y0 + PH - PH * k / 4
            out.append('<text x="%d" y="%.0f" text-anchor="end">%.3g</text>' % (x0 - 4, y + 4, v))
        def px(n):
            return x0 + (ns.index(n) + 0.5) * PW / len(ns)
        for n in ns:
            out.append('<text x="%.0f" y="%d" text-anchor="middle">%d</text>'
                       % (px(n), y0 + PH + 14, n))
        for t in topos:
            pts = [(px(r[1]), y0 + PH - PH * r[col] / top) for r in rows if r[0] == t]
            if not pts:
                continue
            out.append('<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>'
                       % (COLORS.get(t, "black"), " ".join("%.1f,%.1f" % p for p in pts)))
            for p in pts:
                out.append('<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>'
                           % (p[0], p[1], COLORS.get(t, "black")))
    for k, t in enumerate(topos):
        out.append('<text x="%d" y="%d" fill="%s" font-weight="bold">%s</text>'
                   % (50 + k * 150, H - 12, COLORS.get(t, "black"), t))
    out.append('<text x="%d" y="%d">world size (ranks as threads, one host, 2 cores)</text>'
               % (560, H - 12))
    out.append("</svg>")
    open(sys.argv[2], "w").write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
