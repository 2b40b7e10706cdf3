"""Draw the book's chapter map, book/_static/chapter_map.svg, from one list of chapters.

    .venv/bin/python tools/chapter_map.py          # rewrite the SVG
    .venv/bin/python tools/chapter_map.py --check  # exit 1 if the SVG is out of date

The chapter files are read from ``_toc.yml`` (their order numbers the boxes); titles, one-line
subtitles and parts are the table below. A test checks that the two agree.
"""

from __future__ import annotations

import argparse
import sys
from html import escape
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
SVG = ROOT / "book" / "_static" / "chapter_map.svg"

#: Parts of the book: (label, colour).
PARTS = {
    "foundations": ("FOUNDATIONS: ONE ATTENTION HEAD", "#4e79a7"),
    "layer": ("BUILDING THE LAYER", "#59a14f"),
    "fast": ("MAKING IT FAST", "#f28e2b"),
    "work": ("PUTTING IT TO WORK", "#e15759"),
}

#: notebook stem -> (title, subtitle, part)
CHAPTERS = {
    "01_library_analogy": ("The library analogy", "queries, keys, values", "foundations"),
    "02_scaling": ("Scaling by √E", "why divide the scores", "foundations"),
    "03_softmax": ("Softmax", "stable, temperature", "foundations"),
    "04_multi_head": ("Multi-head attention", "split, attend, merge", "layer"),
    "05_positions": ("Positions", "sinusoids, RoPE, ALiBi", "layer"),
    "06_masks": ("Masks", "padding and causal", "layer"),
    "07_complexity": ("Complexity", "FLOPs, memory, intensity", "fast"),
    "08_flash": ("Flash", "tiling + online softmax", "fast"),
    "09_flash_triton": ("Flash in Triton", "write the kernel", "fast"),
    "10_inference": ("Inference", "KV cache, GQA, windows", "work"),
    "11_flex_attention": ("FlexAttention", "mask_mod, score_mod, tiles", "work"),
    "12_capstone": ("Capstone", "watch attention learn", "work"),
    "13_across_devices": ("Across devices", "ring attention, Ulysses", "work"),
    "14_open_models": ("Open models today", "sinks, gates, DeltaNet", "work"),
}

COLS, BOX_W, BOX_H, GAP_X, ROW_H, LEFT, TOP = 4, 218, 74, 30, 138, 24, 60


def toc_chapters() -> list[str]:
    """Notebook stems in ``_toc.yml`` order (``book/NN_name`` entries of every part)."""
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    files = [c["file"] for part in toc.get("parts", []) for c in part.get("chapters", [])]
    return [Path(f).name for f in files if Path(f).name[:2].isdigit()]


def draw(stems: list[str]) -> str:
    """The SVG text for the chapters ``stems`` (in reading order)."""
    rows = (len(stems) + COLS - 1) // COLS
    width = LEFT * 2 + COLS * BOX_W + (COLS - 1) * GAP_X
    height = TOP + rows * ROW_H + 40
    boxes, arrows, labels, seen_parts = [], [], [], set()
    for i, stem in enumerate(stems):
        title, subtitle, part = CHAPTERS[stem]
        label, colour = PARTS[part]
        r, c = divmod(i, COLS)
        x, y = LEFT + c * (BOX_W + GAP_X), TOP + r * ROW_H
        if part not in seen_parts:
            seen_parts.add(part)
            labels.append(f'<text x="{x}" y="{y - 10}" font-size="12" font-weight="bold" '
                          f'fill="{colour}">{escape(label)}</text>')
        boxes.append(
            f'<rect x="{x}" y="{y}" width="{BOX_W}" height="{BOX_H}" rx="10" fill="{colour}" '
            f'fill-opacity="0.12" stroke="{colour}" stroke-width="2"/>\n'
            f'<circle cx="{x + 22}" cy="{y + 24}" r="13" fill="{colour}"/>\n'
            f'<text x="{x + 22}" y="{y + 29}" font-size="14" font-weight="bold" '
            f'text-anchor="middle" fill="#fff">{int(stem[:2])}</text>\n'
            f'<text x="{x + 42}" y="{y + 29}" font-size="14" font-weight="bold" '
            f'fill="#1f2a3c">{escape(title)}</text>\n'
            f'<text x="{x + 14}" y="{y + 56}" font-size="12.5" fill="#333">'
            f'{escape(subtitle)}</text>')
        if i + 1 < len(stems):
            r2, c2 = divmod(i + 1, COLS)
            mid = y + BOX_H / 2
            if r2 == r:
                arrows.append(f'<line x1="{x + BOX_W}" y1="{mid}" x2="{x + BOX_W + GAP_X - 3}" '
                              f'y2="{mid}" stroke="#555" stroke-width="2" '
                              'marker-end="url(#arr)"/>')
            else:  # wrap to the first box of the next row
                cx, ny = x + BOX_W / 2, TOP + r2 * ROW_H
                turn = y + BOX_H + (ROW_H - BOX_H) / 2
                arrows.append(f'<path d="M {cx} {y + BOX_H} L {cx} {turn} L {LEFT + BOX_W / 2} '
                              f'{turn} L {LEFT + BOX_W / 2} {ny - 3}" fill="none" stroke="#555" '
                              'stroke-width="2" marker-end="url(#arr)"/>')
    parts_desc = "; ".join(
        f"{PARTS[p][0].split(':')[0].capitalize()}: "
        + ", ".join(f"{int(s[:2])} {CHAPTERS[s][0]}" for s in stems if CHAPTERS[s][2] == p)
        for p in PARTS if any(CHAPTERS[s][2] == p for s in stems))
    return "\n".join([
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" font-family="DejaVu Sans, Helvetica, Arial, '
        'sans-serif" role="img" aria-labelledby="title desc">',
        '<title id="title">Chapter map of Self-Attention, Executed</title>',
        f'<desc id="desc">{len(stems)} chapters in {len(seen_parts)} parts. '
        f'{escape(parts_desc)}.</desc>',
        '<defs><marker id="arr" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" '
        'markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" '
        'fill="#555"/></marker></defs>',
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>',
        '<text x="24" y="32" font-size="20" font-weight="bold" fill="#1f2a3c">Chapter map</text>',
        f'<text x="{width - LEFT}" y="32" font-size="13" text-anchor="end" fill="#555">each '
        'chapter: intuition → math → code → explorer → exercises</text>',
        *arrows, *boxes, *labels, "</svg>", ""])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the SVG is stale")
    args = parser.parse_args(argv)
    text = draw(toc_chapters())
    if args.check:
        if SVG.read_text(encoding="utf-8") != text:
            print(f"{SVG.relative_to(ROOT)} is out of date: run tools/chapter_map.py",
                  file=sys.stderr)
            return 1
        return 0
    SVG.write_text(text, encoding="utf-8")
    print(f"wrote {SVG.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
