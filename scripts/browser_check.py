#!/usr/bin/env python3
"""Checks `analyzer report` pages in a real browser (headless Chromium); scripts/browser-check runs it.

For each page: a copy with a small harness (before the page's own script) is loaded with --dump-dom; the
harness records script errors, console errors and any network request, measures every plot (its box on
the page, and how much of the box its drawing fills: each heatmap tab in turn), sorts a table by a numeric
column both ways and filters one by the text of a row that another row lacks, and writes what it saw into
the DOM. Then the page itself is screenshotted and the picture checked: not blank, and each plot's box on
it drawn in.

Usage: browser_check.py CHROMIUM PAGE.html [PAGE.html ...]; exit status 0 when every check passes.
Only the standard library: PNG decoding included.
"""
import html
import json
import os
import struct
import subprocess
import sys
import tempfile
import zlib

WIDTH, HEIGHT = 1100, 2600

HARNESS = r"""<script>
"use strict";
window.__check = { errors: [], requests: [] };
addEventListener("error", (e) => __check.errors.push("error: " + (e.message || e.type)));
addEventListener("unhandledrejection", (e) => __check.errors.push("rejection: " + e.reason));
for (const level of ["error", "warn"]) {
  const original = console[level];
  console[level] = (...args) => { __check.errors.push("console." + level + ": " + args.join(" ")); original(...args); };
}
addEventListener("load", () => {
  // The whole page laid out (reading a size forces layout): what a reader waits for.
  __check.layout_ms = (document.body.offsetHeight, performance.now());
  setTimeout(check, 200);
});
function check() {
  const out = __check;
  out.requests = performance.getEntriesByType("resource").map((r) => r.name);
  const measure = (svg) => {
    const box = svg.getBoundingClientRect(), vb = svg.viewBox.baseVal, drawn = svg.getBBox();
    return { id: svg.id, top: box.top + scrollY, left: box.left, width: box.width, height: box.height,
             filledW: drawn.width / vb.width, filledH: drawn.height / vb.height,
             shapes: svg.querySelectorAll("polyline, rect, circle, path").length };
  };
  out.plots = [];
  for (const svg of document.querySelectorAll("svg")) if (!svg.closest("[hidden]")) out.plots.push(measure(svg));
  out.tabs = [];
  for (const button of document.querySelectorAll(".tabs button")) {
    button.click();
    const svg = button.closest("figure").querySelector(".map:not([hidden]) svg");
    out.tabs.push(svg ? measure(svg) : { id: "none shown for " + button.textContent });
  }
  // Sorting: the first table with a numeric column, by that column, ascending then descending.
  out.sort = null;
  for (const table of document.querySelectorAll("table.sortable")) {
    const body = table.tBodies[0];
    if (body.rows.length < 2) continue;
    const col = Array.from(body.rows[0].cells).findIndex((c) => c.dataset.v !== undefined);
    if (col < 0) continue;
    const th = table.tHead.rows[0].cells[col];
    const values = () => Array.from(body.rows).map((r) => parseFloat(r.cells[col].dataset.v));
    th.click();
    const up = values();
    th.click();
    const down = values();
    const sorted = (v, sign) => v.every((x, i) => i === 0 || sign * (x - v[i - 1]) >= 0);
    out.sort = { table: table.id, column: th.textContent, rows: up.length,
                 ascending: sorted(up, 1), descending: sorted(down, -1), distinct: new Set(up).size };
    break;
  }
  // Filtering: the text of a row's code cell keeps the rows that hold each of its words (as page.js
  // reads the box) and hides the others. The text is one that some row lacks: a text every row holds
  // (every spread row names the same collective) would hide nothing and prove nothing.
  out.filter = null;
  const lacks = (row, words) => {
    const text = row.textContent.toLowerCase();
    return !words.every((w) => text.includes(w));
  };
  search: for (const input of document.querySelectorAll("input.filter")) {
    const table = document.getElementById(input.dataset.table), rows = Array.from(table.tBodies[0].rows);
    for (const source of rows.slice().reverse()) {
      const code = source.querySelector("code");
      const words = code ? code.textContent.toLowerCase().split(/\s+/).filter((w) => w) : [];
      if (!words.length || !rows.some((r) => lacks(r, words))) continue;
      input.value = code.textContent;
      input.dispatchEvent(new Event("input"));
      const shown = rows.filter((r) => !r.hidden);
      out.filter = { table: table.id, text: code.textContent, rows: rows.length, shown: shown.length,
                     all_match: shown.every((r) => !lacks(r, words)),
                     hid_only_others: rows.every((r) => !r.hidden || lacks(r, words)),
                     kept_source_row: !source.hidden };
      input.value = "";
      input.dispatchEvent(new Event("input"));
      out.filter.restored = rows.every((r) => !r.hidden);
      break search;
    }
  }
  const pre = document.createElement("pre");
  pre.id = "accutrace-check";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
}
</script>"""

BROWSER_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
    "--disable-background-networking", f"--window-size={WIDTH},{HEIGHT}", "--virtual-time-budget=15000",
]


def run_browser(browser, args):
    proc = subprocess.run([browser, *BROWSER_FLAGS, *args], capture_output=True, text=True, timeout=180)
    return proc.stdout, proc.stderr


def png_pixels(path):
    """(width, height, rows of RGB tuples) of an 8-bit RGB or RGBA PNG."""
    data = open(path, "rb").read()
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError(f"{path} is not a PNG")
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour = header[0], header[1], header[2], header[3]
    if depth != 8 or colour not in (2, 6):
        raise ValueError(f"{path}: PNG depth {depth} colour type {colour} not handled")
    channels = 3 if colour == 2 else 4
    raw, stride = zlib.decompress(idat), width * channels
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - channels] if i >= channels else 0
            up, corner = previous[i], previous[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        rows.append(line)
        previous = line
    return width, height, channels, rows


def inked(rows, channels, left, top, right, bottom):
    """Share of pixels in the box that are not (near) white."""
    total = ink = 0
    for y in range(max(0, int(top)), min(len(rows), int(bottom))):
        line = rows[y]
        for x in range(max(0, int(left)), min(len(line) // channels, int(right))):
            total += 1
            r, g, b = line[x * channels], line[x * channels + 1], line[x * channels + 2]
            if r + g + b < 3 * 235:
                ink += 1
    return ink / total if total else 0.0


def check(browser, page, failures):
    name = os.path.basename(page)
    fail = lambda what: failures.append(f"{name}: {what}")
    text = open(page, encoding="utf-8").read()
    marker = '<meta charset="utf-8">'
    if marker not in text:
        return fail("no <meta charset> to put the harness after")
    with tempfile.TemporaryDirectory() as tmp:
        probe = os.path.join(tmp, "probe.html")
        open(probe, "w", encoding="utf-8").write(text.replace(marker, marker + HARNESS, 1))
        dom, log = run_browser(browser, ["--dump-dom", "file://" + probe])
        start = dom.find('<pre id="accutrace-check">')
        if start < 0:
            return fail("the harness wrote nothing (the page did not load?)\n" + log[-2000:])
        found = json.loads(html.unescape(dom[start + len('<pre id="accutrace-check">'):dom.index("</pre>", start)]))
        shot = os.path.join(tmp, "shot.png")
        run_browser(browser, [f"--screenshot={shot}", "file://" + os.path.abspath(page)])
        if not os.path.exists(shot):
            return fail("no screenshot")
        keep = os.environ.get("BROWSER_CHECK_SCREENSHOTS")
        if keep:
            os.makedirs(keep, exist_ok=True)
            with open(shot, "rb") as src, open(os.path.join(keep, name + ".png"), "wb") as dst:
                dst.write(src.read())
        width, height, channels, rows = png_pixels(shot)
    for error in found["errors"]:
        fail(f"script or console error: {error}")
    for request in found["requests"]:
        fail(f"the page fetched {request}: it must be self-contained")
    plots = found["plots"] + found["tabs"]
    if not plots:
        fail("no plot rendered")
    for p in plots:
        if "width" not in p:
            fail(p["id"])
            continue
        if p["width"] < 200 or p["height"] < 80:
            fail(f"plot {p['id']} is {p['width']:.0f}x{p['height']:.0f} px on the page")
        if p["filledW"] < 0.5 or p["filledH"] < 0.5 or p["shapes"] < 2:
            fail(f"plot {p['id']} draws only {p['filledW']:.0%} x {p['filledH']:.0%} of its box ({p['shapes']} shapes)")
    for p in found["plots"]:
        if p["top"] + p["height"] <= height:
            share = inked(rows, channels, p["left"], p["top"], p["left"] + p["width"], p["top"] + p["height"])
            if share < 0.02:
                fail(f"plot {p['id']} is blank on the screenshot ({share:.1%} ink)")
    page_ink = inked(rows, channels, 0, 0, width, height)
    if page_ink < 0.02:
        fail(f"the screenshot is blank ({page_ink:.1%} ink)")
    s = found["sort"]
    if s is not None and not (s["ascending"] and s["descending"]):
        fail(f"sorting {s['table']} by {s['column']} failed: {s}")
    f = found["filter"]
    if f is not None and not (f["all_match"] and f["hid_only_others"] and f["kept_source_row"] and f["restored"]
                              and f["shown"] < f["rows"]):
        fail(f"filtering {f['table']} failed: {f}")
    print(f"{name}: loaded and laid out in {found['layout_ms']:.0f} ms, {len(plots)} plots drawn, sorted {s and s['rows']} rows, filtered {f and f['rows']} -> "
          f"{f and f['shown']}, screenshot {width}x{height} with {page_ink:.0%} ink, "
          f"{len(found['errors'])} errors, {len(found['requests'])} requests")
    return s is not None, f is not None


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    browser, pages, failures = sys.argv[1], sys.argv[2:], []
    sorted_any = filtered_any = False
    for page in pages:
        sorted_one, filtered_one = check(browser, page, failures) or (False, False)
        sorted_any, filtered_any = sorted_any or sorted_one, filtered_any or filtered_one
    # A page with short tables has nothing to sort; one of the pages must.
    if not sorted_any:
        failures.append("no page has a table with two rows and a numeric column: sorting was not tried")
    if not filtered_any:
        failures.append("no page has a table with a row that a filter would hide: filtering was not tried")
    for failure in failures:
        print("FAILED:", failure, file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
