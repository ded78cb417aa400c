"""The pieces every docs/claims/*.svg figure is drawn with (plain SVG, no plotting library, so a
figure is reproducible from its JSON alone): the document, a panel with its title and y-axis
ticks, a dashed reference line, a legend entry, and writing the file."""


def open_svg(width, height):
    return [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
            'font-family="sans-serif" font-size="12">',
            f'<rect width="{width}" height="{height}" fill="white"/>']


def panel(svg, x0, y0, width, height, title, y_of, title_gap=10,
          ticks=(0.0, 0.25, 0.5, 0.75, 1.0)):
    """A framed panel, its bold title `title_gap` above it, and y ticks at `ticks` (y_of maps a
    value to the page)."""
    svg.append(f'<rect x="{x0}" y="{y0}" width="{width}" height="{height}" fill="none" '
               'stroke="#888"/>')
    svg.append(f'<text x="{x0 + width / 2}" y="{y0 - title_gap}" text-anchor="middle" '
               f'font-weight="bold">{title}</text>')
    for tick in ticks:
        svg.append(f'<line x1="{x0 - 4}" x2="{x0}" y1="{y_of(tick)}" y2="{y_of(tick)}" '
                   'stroke="#888"/>')
        svg.append(f'<text x="{x0 - 6}" y="{y_of(tick) + 4}" text-anchor="end">{tick:g}</text>')


def dashed(svg, x1, x2, y):
    svg.append(f'<line x1="{x1}" x2="{x2}" y1="{y}" y2="{y}" stroke="black" '
               'stroke-dasharray="5,4"/>')


def legend_dot(svg, x, y, color, text):
    svg.append(f'<circle cx="{x}" cy="{y - 4}" r="4" fill="{color}"/>')
    svg.append(f'<text x="{x + 8}" y="{y}">{text}</text>')


def write(svg, path):
    svg.append('</svg>')
    with open(path, "w") as f:
        f.write("\n".join(svg) + "\n")
