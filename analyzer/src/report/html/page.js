"use strict";
// Tables: a click on a heading sorts by that column (numbers by their data-v), the box above filters rows.
for (const th of document.querySelectorAll("table.sortable th")) {
  th.addEventListener("click", () => {
    const table = th.closest("table"), body = table.tBodies[0], col = th.cellIndex;
    const ascending = th.dataset.dir !== "asc";
    for (const other of table.querySelectorAll("th")) delete other.dataset.dir;
    th.dataset.dir = ascending ? "asc" : "desc";
    const key = (tr) => {
      const cell = tr.cells[col];
      return cell.dataset.v !== undefined ? parseFloat(cell.dataset.v) : cell.textContent;
    };
    const rows = Array.from(body.rows);
    rows.sort((a, b) => {
      const x = key(a), y = key(b);
      const order = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
      return ascending ? order : -order;
    });
    for (const row of rows) body.appendChild(row);
  });
}
for (const input of document.querySelectorAll("input.filter")) {
  input.addEventListener("input", () => {
    const words = input.value.toLowerCase().split(/\s+/).filter((w) => w);
    let shown = 0;
    for (const tr of document.getElementById(input.dataset.table).tBodies[0].rows) {
      const text = tr.textContent.toLowerCase();
      tr.hidden = !words.every((w) => text.includes(w));
      if (!tr.hidden) shown++;
    }
    input.nextElementSibling.textContent = words.length ? shown + " rows match" : "";
  });
}
// Heatmaps: one shown at a time (the buttons choose), the value under the pointer in a tooltip.
for (const fig of document.querySelectorAll("figure")) {
  const buttons = fig.querySelectorAll(".tabs button"), maps = fig.querySelectorAll(".map");
  const show = (i) => {
    maps.forEach((m) => (m.hidden = m.dataset.map !== i));
    buttons.forEach((b) => b.classList.toggle("on", b.dataset.map === i));
  };
  buttons.forEach((b) => b.addEventListener("click", () => show(b.dataset.map)));
  if (buttons.length) show(buttons[0].dataset.map);
}
const tip = document.getElementById("tip");
for (const svg of document.querySelectorAll("svg.heatmap")) {
  const d = svg.dataset, rows = d.rows.split("\u001f"), steps = d.steps.split(","), values = d.values.split(",");
  // What a cell is made of (the ranks a count adds), where the map says: per cell, the number of its text.
  const texts = d.detailTexts === undefined ? [] : d.detailTexts.split("\u001f");
  const details = d.details === undefined ? [] : d.details.split(",");
  svg.addEventListener("mousemove", (e) => {
    const box = svg.getBoundingClientRect(), zoom = box.width / svg.viewBox.baseVal.width;
    const c = Math.floor(((e.clientX - box.left) / zoom - d.x0) / d.cw);
    const r = Math.floor(((e.clientY - box.top) / zoom - d.y0) / d.ch);
    if (c < 0 || r < 0 || c >= steps.length || r >= rows.length) { tip.hidden = true; return; }
    const k = details[r * steps.length + c], detail = k ? texts[Number(k)] : "";
    tip.textContent = rows[r] + ", step " + steps[c] + ": " + (values[r * steps.length + c] || d.empty) +
      (detail ? " (" + detail + ")" : "");
    tip.style.left = e.pageX + 12 + "px";
    tip.style.top = e.pageY + 12 + "px";
    tip.hidden = false;
  });
  svg.addEventListener("mouseleave", () => (tip.hidden = true));
}
