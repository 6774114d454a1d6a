#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Draw the curve of `gpusys-bench copy --csv FILE` as an SVG (no packages).

    bench/plot_copy.py copy.csv bench/copy.svg

Two panels (host to device, device to host), GB/s against size on a log
axis, one line per column of the CSV.
"""
import csv
import math
import sys

COLS = [("pageable", "cudaMemcpy pageable", "#d62728"),
        ("pinned", "cudaMemcpy pinned (the link)", "#7f7f7f"),
        ("gpusys", "gpusys_memcpy (by size)", "#1f77b4"),
        ("staged", "engine, staged", "#2ca02c"),
        ("in_place", "engine, pinned in place", "#ff7f0e")]
W, H = 560, 360          # one panel
ML, MR, MT, MB = 60, 20, 40, 50


def size_label(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return "%d %s" % (n >> shift, unit)
    return "%d B" % n


def panel(rows, title, x0, ymax, out):
    sizes = [r["bytes"] for r in rows]
    lo, hi = math.log2(min(sizes)), math.log2(max(sizes))
    pw, ph = W - ML - MR, H - MT - MB

    def px(n):
        return x0 + ML + (math.log2(n) - lo) / max(hi - lo, 1) * pw

    def py(g):
        return MT + ph - g / ymax * ph

    out.append('<text x="%d" y="24" font-size="15" font-weight="bold">%s</text>' % (x0 + ML, title))
    out.append('<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#000"/>' % (x0 + ML, MT, pw, ph))
    for g in range(0, int(ymax) + 1, 10):
        out.append('<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>' % (x0 + ML, py(g), x0 + ML + pw, py(g)))
        out.append('<text x="%d" y="%.1f" font-size="11" text-anchor="end">%d</text>' % (x0 + ML - 5, py(g) + 4, g))
    for n in sizes:
        out.append('<text x="%.1f" y="%d" font-size="10" text-anchor="middle">%s</text>' % (px(n), MT + ph + 15, size_label(n)))
    out.append('<text x="%d" y="%d" font-size="12" text-anchor="middle">bytes per copy</text>' % (x0 + ML + pw // 2, H - 10))
    out.append('<text x="%d" y="%d" font-size="12" transform="rotate(-90 %d %d)" text-anchor="middle">GB/s</text>'
               % (x0 + 16, MT + ph // 2, x0 + 16, MT + ph // 2))
    # the 35 GB/s target from 256 MiB
    big = [n for n in sizes if n >= 256 << 20]
    if big:
        out.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#000" stroke-dasharray="4 3"/>'
                   % (px(big[0]), py(35), px(big[-1]), py(35)))
        out.append('<text x="%.1f" y="%.1f" font-size="10" text-anchor="end">target 35</text>' % (px(big[-1]), py(35) - 4))
    for key, _, color in COLS:
        pts = " ".join("%.1f,%.1f" % (px(r["bytes"]), py(r[key])) for r in rows if r[key] > 0)
        out.append('<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>' % (pts, color))
        for r in rows:
            if r[key] > 0:
                out.append('<circle cx="%.1f" cy="%.1f" r="2.5" fill="%s"/>' % (px(r["bytes"]), py(r[key]), color))


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    rows = {"h2d": [], "d2h": []}
    with open(sys.argv[1]) as f:
        for r in csv.DictReader(f):
            d = {"bytes": int(r["bytes"])}
            for key, _, _ in COLS:
                d[key] = float(r[key])
            rows[r["dir"]].append(d)
    ymax = max(r[k] for d in rows.values() for r in d for k, _, _ in COLS)
    ymax = math.ceil(ymax / 10) * 10
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif">' % (2 * W, H + 60),
           '<rect width="100%" height="100%" fill="#fff"/>']
    panel(rows["h2d"], "host to device (pageable source)", 0, ymax, out)
    panel(rows["d2h"], "device to host (pageable destination)", W, ymax, out)
    x = ML
    for _, label, color in COLS:
        out.append('<rect x="%d" y="%d" width="14" height="4" fill="%s"/>' % (x, H + 20, color))
        out.append('<text x="%d" y="%d" font-size="12">%s</text>' % (x + 18, H + 26, label))
        x += 30 + 7 * len(label)
    out.append("</svg>")
    with open(sys.argv[2], "w") as f:
        f.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
