// kformer's web page: pick a model, ask it, see the answer and its attention. No build step, no CDN.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { models: [], meta: {}, explained: null };
const PROMPTS = {
  classify: ["Ticket", "e.g. my laptop will not boot after the update"],
  translate: ["Sentence", "e.g. How are you?"],
  arithmetic: ["Problem", "e.g. 1234+4567"],
};

class ApiError extends Error {}

async function api(path, body) {
  const headers = { "Content-Type": "application/json" };
  const key = $("api-key").value.trim();
  if (key) headers.Authorization = `Bearer ${key}`;
  let response;
  try {
    response = await fetch(path, body === undefined ? { headers } : { method: "POST", headers, body: JSON.stringify(body) });
  } catch (err) {
    throw new ApiError("Could not reach the service. Is `kformer serve` still running?");
  }
  let data = null;
  try { data = await response.json(); } catch (err) { /* not JSON */ }
  if (!response.ok) {
    const message = (data && data.error) || `the service answered ${response.status} ${response.statusText}`;
    const where = data && data.field ? ` (field: ${data.field})` : "";
    const hint = response.status === 401 ? " Type the service's API key at the top of the page." : "";
    throw new ApiError(`The service said: ${message}${where}.${hint}`.replace("..", "."));
  }
  return data;
}

function showError(err) {
  const box = $("error");
  box.textContent = err instanceof ApiError ? err.message : `Something went wrong in the page: ${err}`;
  box.hidden = false;
}

function clearError() { $("error").hidden = true; $("error").textContent = ""; }

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  for (const child of children) node.append(child);
  return node;
}

function currentTask() { return (state.meta[$("model").value] || {}).task; }

async function loadModels() {
  try {
    const { models } = await api("/v1/models");
    state.models = models;
    const select = $("model");
    select.replaceChildren(...models.map((m) => el("option", { value: m.name }, `${m.name} (${m.task || "loading"})`)));
    const wanted = new URLSearchParams(location.search).get("model");
    if (wanted && models.some((m) => m.name === wanted)) select.value = wanted;
    await modelChanged();
  } catch (err) { showError(err); }
}

async function modelChanged() {
  clearError();
  $("result").hidden = true; $("attention").hidden = true;
  const name = $("model").value;
  if (!name) return;
  try {
    if (!state.meta[name]) state.meta[name] = await api(`/v1/models/${encodeURIComponent(name)}/metadata`);
  } catch (err) { showError(err); return; }
  const meta = state.meta[name];
  const [label, example] = PROMPTS[meta.task] || ["Text", ""];
  $("text-label").textContent = label;
  // an arithmetic folder says its operators (the example uses the first: 1234*4567 for products)
  // and the longest numbers it accepts; longer ones are refused by the service
  const placeholder = meta.ops ? example.replace("+", meta.ops[0]) : example;
  $("text").placeholder = meta.max_digits ? `${placeholder} (numbers of up to ${meta.max_digits} digits)` : placeholder;
  $("top-k-box").hidden = !("top_k" in (meta.parameters || {}));
  $("beam-box").hidden = !("beam" in (meta.parameters || {}));
  $("model-info").textContent = `${meta.task}, version ${meta.version}${headline(meta.metrics || {})}`;
}

// The held-out score the folder's metrics report (test, else validation, else top level).
function headline(metrics) {
  for (const [where, scores] of [["test", metrics.test], ["validation", metrics.valid], ["held-out", metrics]]) {
    if (!scores || typeof scores !== "object") continue;
    const key = ["accuracy", "exact_match", "bleu"].find((k) => typeof scores[k] === "number");
    if (key) return `, ${where} ${key.replace("_", " ")} ${key === "bleu" ? scores[key].toFixed(1) : (100 * scores[key]).toFixed(1) + " %"}`;
  }
  return "";
}

function parameters() {
  const meta = state.meta[$("model").value] || {};
  const params = {};
  if ("top_k" in (meta.parameters || {})) params.top_k = Number($("top-k").value) || 1;
  if ("beam" in (meta.parameters || {})) params.beam = Number($("beam").value) || 1;
  return params;
}

async function busy(button, work) {
  button.disabled = true;
  clearError();
  try { await work(); } catch (err) { showError(err); } finally { button.disabled = false; }
}

async function predict(event) {
  event.preventDefault();
  const text = $("text").value;
  await busy($("predict"), async () => {
    const name = $("model").value;
    const data = await api(`/v1/models/${encodeURIComponent(name)}:predict`, { instances: [text], parameters: parameters() });
    showPrediction(currentTask(), data.predictions[0]);
  });
}

function showPrediction(task, p) {
  const box = $("result");
  if (task === "classify") {
    const bars = (p.top_k || []).map((t) => el("div", { class: "bar" },
      el("span", { class: "bar-label" }, t.label),
      el("span", { class: "track" }, el("span", { class: "fill", style: `width:${(100 * t.probability).toFixed(1)}%` })),
      el("span", { class: "pct" }, `${(100 * t.probability).toFixed(1)} %`)));
    const answer = el("p", { class: "answer" }, el("span", { id: "label" }, p.label), " ",
      el("small", {}, `${(100 * p.probability).toFixed(1)} %${p.unknown ? " (below the threshold)" : ""}`));
    box.replaceChildren(el("h2", {}, "Predicted label"), answer, ...bars);
  } else if (task === "translate") {
    box.replaceChildren(el("h2", {}, "Translation"), el("p", { class: "answer", id: "translation" }, p.translation));
  } else {
    const shown = p.answer === null || p.answer === undefined ? `${p.text} (not a number: the model has not learned this yet)` : String(p.answer);
    box.replaceChildren(el("h2", {}, "Answer"), el("p", { class: "answer", id: "answer" }, shown));
  }
  box.hidden = false;
}

async function explain() {
  const text = $("text").value;
  if (!text.trim()) { showError(new ApiError("Type something first.")); return; }
  await busy($("explain"), async () => {
    const name = $("model").value;
    state.explained = await api(`/v1/models/${encodeURIComponent(name)}:explain`, { instances: [text] });
    const names = Object.keys(state.explained.maps);
    $("map").replaceChildren(...names.map((n) => el("option", { value: n }, n.replace("_", " "))));
    mapChanged();
    $("attention").hidden = false;
  });
}

function options(select, count, first) {
  const items = first ? [el("option", { value: "mean" }, first)] : [];
  for (let i = 0; i < count; i++) items.push(el("option", { value: String(i) }, String(i + 1)));
  select.replaceChildren(...items);
}

function mapChanged() {
  const map = state.explained.maps[$("map").value];
  options($("layer"), map.weights.length);
  options($("head"), map.weights[0].length, "mean of heads");
  draw();
}

function grid() {
  const map = state.explained.maps[$("map").value];
  const heads = map.weights[Number($("layer").value)];
  const head = $("head").value;
  if (head !== "mean") return heads[Number(head)];
  return heads[0].map((row, q) => row.map((_, k) => heads.reduce((sum, h) => sum + h[q][k], 0) / heads.length));
}

function draw() {
  const map = state.explained.maps[$("map").value];
  const weights = grid();
  const canvas = $("heatmap");
  const ctx = canvas.getContext("2d");
  const font = '13px system-ui, "Lohit Tamil", "Noto Sans Tamil", sans-serif';
  ctx.font = font;
  const widest = (labels) => Math.max(20, ...labels.map((t) => ctx.measureText(t).width));
  const left = widest(map.rows) + 12, top = widest(map.cols) + 12;
  const cell = Math.max(14, Math.min(36, Math.floor(640 / Math.max(map.cols.length, map.rows.length))));
  const scale = window.devicePixelRatio || 1;
  const width = left + cell * map.cols.length + 4, height = top + cell * map.rows.length + 4;
  canvas.width = width * scale; canvas.height = height * scale;
  canvas.style.width = `${width}px`; canvas.style.height = `${height}px`;
  ctx.setTransform(scale, 0, 0, scale, 0, 0);
  ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, width, height);
  ctx.font = font; ctx.fillStyle = "#1d2330"; ctx.textBaseline = "middle";
  ctx.textAlign = "right";
  map.rows.forEach((t, i) => ctx.fillText(t, left - 6, top + cell * (i + 0.5)));
  map.cols.forEach((t, j) => {
    ctx.save(); ctx.translate(left + cell * (j + 0.5), top - 6); ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "left"; ctx.fillText(t, 0, 0); ctx.restore();
  });
  const peak = Math.max(1e-6, ...weights.flat());  // the darkest cell is the largest weight shown
  weights.forEach((row, i) => row.forEach((w, j) => {
    const shade = Math.round(255 * (1 - Math.min(1, Math.max(0, w / peak))));
    ctx.fillStyle = `rgb(${shade}, ${Math.round(shade * 0.9 + 25)}, 255)`;
    ctx.fillRect(left + cell * j, top + cell * i, cell - 1, cell - 1);
  }));
  canvas.dataset.rows = map.rows.length; canvas.dataset.cols = map.cols.length;
  canvas.onmousemove = (e) => {
    const box = canvas.getBoundingClientRect();
    const j = Math.floor((e.clientX - box.left - left) / cell), i = Math.floor((e.clientY - box.top - top) / cell);
    if (i >= 0 && j >= 0 && i < map.rows.length && j < map.cols.length) {
      $("cell").textContent = `"${map.rows[i]}" → "${map.cols[j]}": ${weights[i][j].toFixed(3)}`;
    }
  };
  const out = state.explained.output;
  $("cell").textContent = `darkest cell = weight ${peak.toFixed(3)}` + (out !== null && out !== undefined ? ` · model output: ${out}` : "");
}

$("model").addEventListener("change", modelChanged);
$("ask").addEventListener("submit", predict);
$("explain").addEventListener("click", explain);
$("map").addEventListener("change", mapChanged);
$("layer").addEventListener("change", draw);
$("head").addEventListener("change", draw);
$("api-key").addEventListener("change", () => { state.meta = {}; loadModels(); });
loadModels();
