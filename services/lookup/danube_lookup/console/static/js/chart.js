// A live line chart drawn as SVG: a sliding time window, a y axis with round ticks, one line
// per series and a legend with each series' latest value. Samples are kept by the caller (in
// a Samples buffer), so a chart re-created after navigating away keeps its history.

import { fmt, h } from "./core.js";

const SVG = "http://www.w3.org/2000/svg";

function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) el.setAttribute(key, String(value));
  for (const child of children) el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return el;
}

// Round tick step for a range: 1, 2 or 5 times a power of ten, about `count` ticks.
export function niceStep(max, count = 4) {
  if (!(max > 0)) return 1;
  const raw = max / count;
  const power = 10 ** Math.floor(Math.log10(raw));
  const unit = raw / power;
  const step = unit <= 1 ? 1 : unit <= 2 ? 2 : unit <= 5 ? 5 : 10;
  return step * power;
}

// A colour sample (set through the CSSOM: the page's CSP allows no inline style attributes).
export function swatch(color) {
  const el = h("span", { class: "swatch" });
  el.style.background = color;
  return el;
}

function shortNumber(v) {
  if (v >= 1e6) return `${+(v / 1e6).toFixed(1)}M`;
  if (v >= 1e3) return `${+(v / 1e3).toFixed(1)}k`;
  return `${+v.toFixed(1)}`;
}

// Samples of several series over time: push(t_ms, [v0, v1, ...]), at most `keep` of them.
export class Samples {
  constructor(keep = 300) {
    this.keep = keep;
    this.points = [];
  }

  push(t, values) {
    this.points.push({ t, values });
    if (this.points.length > this.keep) this.points.splice(0, this.points.length - this.keep);
  }

  latest() {
    return this.points.length ? this.points[this.points.length - 1] : null;
  }
}

export class LiveChart {
  // series: [{name, color}]; windowS: seconds shown; unit: text after values in the legend.
  constructor(samples, { series, windowS = 300, unit = "", height = 220 }) {
    this.samples = samples;
    this.series = series;
    this.windowS = windowS;
    this.unit = unit;
    this.height = height;
    this.legend = h("div", { class: "chart-legend" });
    this.plot = h("div", { class: "chart-plot" });
    this.el = h("div", { class: "chart", "data-test": "chart" }, this.legend, this.plot);
    this.observer = new ResizeObserver(() => this.draw());
    this.observer.observe(this.plot);
  }

  draw() {
    const width = this.plot.clientWidth;
    if (!width) return;
    const height = this.height;
    const m = { left: 52, right: 14, top: 12, bottom: 26 };
    const w = width - m.left - m.right;
    const hgt = height - m.top - m.bottom;
    const now = Date.now();
    // The window grows with the data, from one minute up to windowS.
    const first = this.samples.points.length ? this.samples.points[0].t : now;
    const spanS = Math.min(this.windowS, Math.max(60, (now - first) / 1000));
    const from = now - spanS * 1000;
    const points = this.samples.points.filter((p) => p.t >= from - 5000);
    const max = Math.max(0, ...points.flatMap((p) => p.values.filter((v) => Number.isFinite(v))));
    const step = niceStep(max * 1.1 || 1);
    const top = Math.max(step, Math.ceil((max * 1.1) / step) * step);
    const x = (t) => m.left + ((t - from) / (now - from)) * w;
    const y = (v) => m.top + hgt - (v / top) * hgt;

    const svg = s("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img" });
    const clipId = `clip-${Math.random().toString(36).slice(2)}`;
    svg.append(s("defs", {}, s("clipPath", { id: clipId }, s("rect", { x: m.left, y: m.top, width: w, height: hgt }))));
    for (let v = 0; v <= top + step / 2; v += step) {
      svg.append(s("line", { x1: m.left, x2: m.left + w, y1: y(v), y2: y(v), class: "grid" }));
      svg.append(s("text", { x: m.left - 8, y: y(v) + 4, "text-anchor": "end", class: "axis" }, shortNumber(v)));
    }
    const tickS = spanS > 600 ? 300 : spanS > 120 ? 60 : 15;
    const firstTick = Math.ceil(from / (tickS * 1000)) * tickS * 1000;
    for (let t = firstTick; t <= now; t += tickS * 1000) {
      svg.append(s("line", { x1: x(t), x2: x(t), y1: m.top + hgt, y2: m.top + hgt + 4, class: "tick" }));
      svg.append(s("text", { x: x(t), y: height - 6, "text-anchor": "middle", class: "axis" }, tickS < 60 ? fmt.clock(t) : fmt.clock(t).slice(0, 5)));
    }
    svg.append(s("line", { x1: m.left, x2: m.left + w, y1: m.top + hgt, y2: m.top + hgt, class: "baseline" }));
    const lines = s("g", { "clip-path": `url(#${clipId})` });
    this.series.forEach((serie, i) => {
      const pts = points.filter((p) => Number.isFinite(p.values[i])).map((p) => [x(p.t), y(p.values[i])]);
      if (pts.length === 0) return;
      const path = pts.map(([px, py], j) => `${j ? "L" : "M"}${px.toFixed(1)},${py.toFixed(1)}`).join("");
      if (i === 0 && pts.length > 1) {
        const area = `${path}L${pts[pts.length - 1][0].toFixed(1)},${y(0)}L${pts[0][0].toFixed(1)},${y(0)}Z`;
        lines.append(s("path", { d: area, fill: serie.color, class: "area" }));
      }
      // Later series are dashed, so equal values (in = out) still show both lines.
      lines.append(s("path", { d: path, stroke: serie.color, class: i ? "line line-dashed" : "line" }));
      const [lx, ly] = pts[pts.length - 1];
      lines.append(s("circle", { cx: lx, cy: ly, r: 3, fill: serie.color }));
    });
    svg.append(lines);
    if (points.length === 0) {
      svg.append(s("text", { x: m.left + w / 2, y: m.top + hgt / 2, "text-anchor": "middle", class: "axis" }, "waiting for data\u2026"));
    }
    this.plot.replaceChildren(svg);

    const last = this.samples.latest();
    this.legend.replaceChildren(
      ...this.series.map((serie, i) =>
        h(
          "span",
          { class: "legend-item" },
          swatch(serie.color),
          `${serie.name} `,
          h("strong", { "data-series": serie.name }, last ? `${fmt.rate(last.values[i])}${this.unit}` : "\u2013"),
        ),
      ),
    );
  }

  destroy() {
    this.observer.disconnect();
  }
}
