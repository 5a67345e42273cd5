#!/usr/bin/env python3
"""summary_svg.py — bench/run.sh's summary as a picture.

    summary_svg.py SUMMARY.tsv OUT.svg

Reads the summary run.sh writes (bench/out/summary.tsv: a "# machine: ..."
line, a header, then part, figure, subject, reference, ratio, target,
verdict per row, tab-separated) and draws each row as a horizontal bar
against its target line: the ratio (or, for a target on the figure itself
such as peak RSS, the figure) scaled so that the target sits on one
vertical line for every row, green where the verdict is ok, red where it is
MISSED, grey where it is n/a (with the reason), blue for a measured ratio
with no target (its line is 1.0, the reference). A bar longer than the
plot is cut with an arrow; the value is always written beside it.
Standard library only.
"""
import re
import sys
from xml.sax.saxutils import escape

W = 1560          # picture width
ROW_H = 22
LEFT = 16         # part column
FIG_X = 90        # figure column
PLOT_X = 660      # bars start here
PLOT_W = 330      # bar area
LINE_AT = 0.4     # the target line's place in the bar area (so up to 2.5x shows)
TEXT_X = PLOT_X + PLOT_W + 12

COLOURS = {
    "ok": ("#2e9d4f", "#1d1d1d"),
    "missed": ("#d13b3b", "#1d1d1d"),
    "na": ("#c4c4c4", "#8a8a8a"),
    "measured": ("#5b8fd6", "#1d1d1d"),
    "text": (None, "#1d1d1d"),
}


def number(s):
    try:
        return float(s)
    except (TypeError, ValueError):
        return None


def kind(verdict):
    v = verdict.strip()
    if v.startswith("ok"):
        return "ok"
    if v.startswith("MISSED"):
        return "missed"
    if v.startswith("n/a"):
        return "na"
    return "measured"


def bar_of(row):
    """(value, line value, op, label) to draw, or None for a text-only row."""
    _, _, subject, _, ratio, target, _ = row
    m = re.match(r"\s*(>=|<=)\s*([0-9.]+)", target)
    op, limit = (m.group(1), float(m.group(2))) if m else (None, None)
    r = number(ratio)
    if r is not None:
        return r, (limit if limit else 1.0), op, ratio + "\u00d7"
    s = number(subject)
    # a target on the figure itself (RSS MiB): a row without a ratio ("-");
    # "n/a" is a ratio that could not be taken, not a figure to judge
    if s is not None and limit and ratio.strip() == "-":
        return s, limit, op, subject
    return None


def main():
    if len(sys.argv) != 3:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    machine = ""
    rows = []
    with open(sys.argv[1], encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith("# "):
                machine = line[2:]
                continue
            if line.startswith("part\t") or not line.strip():
                continue
            cells = line.split("\t")
            cells += [""] * (7 - len(cells))
            rows.append(cells[:7])

    top = 78
    h = top + ROW_H * len(rows) + 40
    out = []
    add = out.append
    add(f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{h}" '
        f'viewBox="0 0 {W} {h}" font-family="DejaVu Sans, Helvetica, Arial, sans-serif" '
        f'font-size="12">')
    add(f'<rect width="{W}" height="{h}" fill="#ffffff"/>')
    add(f'<text x="{LEFT}" y="24" font-size="16" font-weight="bold">miaosha bench/run.sh: '
        f'each ratio against its target</text>')
    add(f'<text x="{LEFT}" y="44" fill="#444">{escape(machine)}</text>')
    line_x = PLOT_X + PLOT_W * LINE_AT
    add(f'<text x="{LEFT}" y="64" fill="#444">bars: subject / reference (the figure itself '
        f'where the target is on it); the vertical line is the target, or 1.0 where there is '
        f'none; green ok, red MISSED, grey n/a, blue measured</text>')

    last_part = None
    for i, row in enumerate(rows):
        part, figure, subject, reference, ratio, target, verdict = row
        y = top + i * ROW_H
        k = kind(verdict)
        fill, ink = COLOURS[k]
        if part != last_part:
            add(f'<line x1="{LEFT}" y1="{y}" x2="{W - LEFT}" y2="{y}" stroke="#dddddd"/>')
            add(f'<text x="{LEFT}" y="{y + 15}" font-weight="bold">{escape(part)}</text>')
            last_part = part
        add(f'<text x="{FIG_X}" y="{y + 15}" fill="{ink}">{escape(figure.strip())}</text>')
        b = bar_of(row)
        if b is None:
            note = " ".join(x for x in (subject, verdict) if x and x != "-")
            add(f'<text x="{PLOT_X}" y="{y + 15}" fill="{ink}">{escape(note)}</text>')
            continue
        value, line_value, op, label = b
        full = PLOT_W * LINE_AT / line_value * max(value, 0.0)
        cut = full > PLOT_W
        length = min(full, PLOT_W)
        add(f'<rect x="{PLOT_X}" y="{y + 5}" width="{length:.1f}" height="{ROW_H - 9}" '
            f'fill="{fill}" opacity="{0.55 if k == "na" else 0.85}"/>')
        if cut:
            ax = PLOT_X + PLOT_W
            add(f'<path d="M{ax - 8} {y + 4} L{ax + 2} {y + ROW_H / 2 + 0.5} L{ax - 8} {y + ROW_H - 3} Z" '
                f'fill="{fill}"/>')
        dash = "" if op else ' stroke-dasharray="3,2"'
        add(f'<line x1="{line_x:.1f}" y1="{y + 2}" x2="{line_x:.1f}" y2="{y + ROW_H - 1}" '
            f'stroke="#1d1d1d" stroke-width="{1.6 if op else 0.8}"{dash}/>')
        tgt = target.strip()
        text = f"{label}  {verdict.strip()}" if tgt in ("", "-") else f"{label}  (target {tgt})  {verdict.strip()}"
        add(f'<text x="{TEXT_X}" y="{y + 15}" fill="{ink}">{escape(text)}</text>')

    add('</svg>')
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
