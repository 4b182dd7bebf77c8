"""A small inline SVG line chart of put and take rates (no JavaScript library, nothing fetched)."""

from __future__ import annotations

from html import escape

from zkqueue.ops.history import Sample

WIDTH, HEIGHT, PAD = 240, 60, 4


def rate_chart(samples: list[Sample], title: str = "") -> str:
    """Puts/s (blue) and takes/s (green) of ``samples`` as an SVG element."""
    if len(samples) < 2:
        return (f'<svg class="chart" width="{WIDTH}" height="{HEIGHT}" role="img"><title>{escape(title)}</title>'
                f'<text x="8" y="{HEIGHT // 2}" class="muted">collecting…</text></svg>')
    t0, t1 = samples[0].at, samples[-1].at
    top = max(1.0, *(max(s.puts_per_s, s.takes_per_s) for s in samples))

    def line(values: list[float]) -> str:
        pts = []
        for s, v in zip(samples, values):
            x = PAD + (WIDTH - 2 * PAD) * ((s.at - t0) / (t1 - t0 or 1))
            y = HEIGHT - PAD - (HEIGHT - 2 * PAD) * (v / top)
            pts.append(f"{x:.1f},{y:.1f}")
        return " ".join(pts)

    return (f'<svg class="chart" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" role="img">'
            f'<title>{escape(title)}</title>'
            f'<polyline fill="none" stroke="#2563eb" stroke-width="1.5" points="{line([s.puts_per_s for s in samples])}"/>'
            f'<polyline fill="none" stroke="#16a34a" stroke-width="1.5" points="{line([s.takes_per_s for s in samples])}"/>'
            f'<text x="{WIDTH - PAD}" y="12" text-anchor="end" class="muted">max {top:,.1f}/s</text></svg>')
