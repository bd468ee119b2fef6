// rstar2 view: one page, four views chosen by the URL's hash:
//   #/                      the run(s): config, stages, curves, recorded steps and evaluations
//   #/set/ID                a step's (or an evaluation's) rollouts: filters, sorting
//   #/rollout/ID/N          one rollout: its conversation, reward and why, its group
//   #/compare/A/B[/K]       two sets side by side, matched by problem (K: the problem opened)
// Data comes from the server's /api/* JSON (rstar2/view/app.py); charts are plain SVG.
"use strict";

const main = document.getElementById("main");
const crumbs = document.getElementById("crumbs");
const statusLine = document.getElementById("status");
let timer = null;

function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, (c) => (
    { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
function fmt(x, digits = 3) {
  if (x === null || x === undefined || x === "") return "";
  return typeof x === "number" && !Number.isInteger(x) ? x.toFixed(digits) : String(x);
}
async function get(path) {
  const r = await fetch(path, { cache: "no-store" });
  if (!r.ok) throw new Error(`${path}: ${r.status} ${(await r.json()).detail || ""}`);
  return r.json();
}
function tag(text, kind = "") { return `<span class="tag ${kind}">${esc(text)}</span>`; }
function setCrumbs(parts) {
  crumbs.innerHTML = parts.map(([label, href]) =>
    href ? `<a href="${href}">${esc(label)}</a>` : `<span>${esc(label)}</span>`).join("");
}

// --- the run page -----------------------------------------------------------------------------

const CHARTS = [
  ["reward (mean per step)", [["reward_mean", "reward"]]],
  ["accuracy (avg@k, 95% interval)", [["heldout_accuracy", "validation", "heldout_ci95"],
                                      ["test_accuracy", "test", "test_ci95"]]],
  ["response length (tokens)", [["response_tokens_mean", "mean response tokens"]]],
  ["tool calls per rollout", [["tool_calls_mean", "tool calls"]]],
  ["failed calls inside correct rollouts", [["tool_error_ratio_correct", "failed / calls"],
                                            ["correct_with_failed_call", "rollouts with one"]]],
  ["step time split (s)", [["time_gen_s", "gen"], ["time_tool_s", "tool"],
                           ["time_reward_s", "reward"], ["time_learner_s", "learner"],
                           ["time_sync_s", "sync"], ["time_eval_s", "eval"]]],
];
const COLORS = ["#2f6fd6", "#d8572a", "#2e9d4f", "#8a4fd6", "#c99a06", "#5b6578"];

function niceStep(raw) {
  // the smallest of 1, 2, 2.5, 5 x 10^k at least `raw`: round tick labels
  const p = 10 ** Math.floor(Math.log10(raw));
  return [1, 2, 2.5, 5, 10].map((m) => m * p).find((s) => s >= raw * 0.999);
}

function chart(title, rows, series, linkOf, xRange) {
  const W = 420, H = 190, L = 44, R = 10, T = 10, B = 24;
  const lines = series.map(([key, name, ci], k) => ({
    name, color: COLORS[k % COLORS.length],
    pts: rows.filter((r) => typeof r[key] === "number")
      .map((r) => ({ x: r.step, y: r[key], ci: ci ? r[ci] : null, stage: r.stage })),
  })).filter((s) => s.pts.length);
  if (!lines.length) return "";
  const all = lines.flatMap((s) => s.pts);
  const xs = all.map((p) => p.x);
  const ys = all.flatMap((p) => (p.ci ? [p.y, ...p.ci] : [p.y]));
  let [x0, x1] = [Math.min(xRange[0], ...xs), Math.max(xRange[1], ...xs)];
  let [y0, y1] = [Math.min(0, ...ys), Math.max(...ys)];
  if (x1 === x0) x1 = x0 + 1;
  if (y1 === y0) y1 = y0 + 1;
  const yStep = niceStep((y1 - y0) / 4), xStep = Math.max(1, Math.round(niceStep((x1 - x0) / 5)));
  [y0, y1] = [Math.floor(y0 / yStep) * yStep, Math.ceil(y1 / yStep) * yStep];
  const sx = (x) => L + (x - x0) / (x1 - x0) * (W - L - R);
  const sy = (y) => H - B - (y - y0) / (y1 - y0) * (H - T - B);
  let svg = `<svg viewBox="0 0 ${W} ${H}" role="img" aria-label="${esc(title)}">`;
  for (let y = y0; y <= y1 + yStep / 2; y += yStep) {
    const label = Number(y.toPrecision(6));
    svg += `<line x1="${L}" x2="${W - R}" y1="${sy(y)}" y2="${sy(y)}" stroke="#eceff3"/>` +
      `<text x="${L - 4}" y="${sy(y) + 4}" font-size="10" text-anchor="end">${label}</text>`;
  }
  for (let x = Math.ceil(x0 / xStep) * xStep; x <= x1; x += xStep) {
    svg += `<text x="${sx(x)}" y="${H - 8}" font-size="10" text-anchor="middle">${x}</text>`;
  }
  for (const s of lines) {
    const path = s.pts.map((p) => `${sx(p.x).toFixed(1)},${sy(p.y).toFixed(1)}`).join(" ");
    svg += `<polyline fill="none" stroke="${s.color}" stroke-width="1.5" points="${path}"/>`;
    for (const p of s.pts) {
      if (p.ci) {
        svg += `<line x1="${sx(p.x)}" x2="${sx(p.x)}" y1="${sy(p.ci[0])}" y2="${sy(p.ci[1])}" ` +
          `stroke="${s.color}" stroke-opacity=".5" stroke-width="3"/>`;
      }
      const tip = `${s.name} at step ${p.x} (${p.stage}): ${fmt(p.y, 4)}` +
        (p.ci ? ` [${fmt(p.ci[0], 3)}, ${fmt(p.ci[1], 3)}]` : "");
      const dot = `<circle cx="${sx(p.x)}" cy="${sy(p.y)}" r="3" fill="${s.color}">` +
        `<title>${esc(tip)}</title></circle>`;
      const href = linkOf(p.x, p.stage);
      svg += href ? `<a href="${href}">${dot}</a>` : dot;
    }
  }
  svg += "</svg>";
  const legend = lines.map((s) => `<span style="color:${s.color}">&#9632; ${esc(s.name)}</span>`);
  return `<div class="chart"><h3>${esc(title)}</h3>${svg}<div class="legend">${legend.join("")}</div></div>`;
}

function setsTable(sets) {
  if (!sets.length) return "<p class='muted'>No recorded rollouts yet.</p>";
  const head = "<tr><th></th><th>recorded</th><th>rollouts</th><th>correct</th>" +
    "<th>accuracy</th><th>with failed calls</th></tr>";
  const body = sets.map((s) => `<tr data-set="${s.id}">` +
    `<td><input type="checkbox" class="pick" value="${s.id}" aria-label="pick ${esc(s.label)}"></td>` +
    `<td><a href="#/set/${s.id}">${esc(s.label)}</a></td><td class="num">${s.rollouts}</td>` +
    `<td class="num">${s.correct}</td><td class="num">${fmt(s.accuracy)}</td>` +
    `<td class="num">${s.with_failed_calls}</td></tr>`).join("");
  return `<table class="sets">${head}${body}</table>`;
}

function sourceSection(src) {
  let html = `<section class="source"><h2>${esc(src.path)} ${tag(src.status,
    src.status === "running" ? "warn" : "ok")}</h2>`;
  if (src.kind === "run") {
    const done = src.metrics.filter((r) => typeof r.reward_mean === "number").length;
    html += `<p>${done} of ${src.total_steps} RL steps done.</p>`;
    html += "<h3>Stages</h3><table><tr><th>name</th><th>steps</th><th>max response tokens</th>" +
      "<th>max turns</th><th>filter solved</th></tr>" + src.stages.map((s) =>
        `<tr><td>${esc(s.name)}</td><td class="num">${fmt(s.steps)}</td>` +
        `<td class="num">${fmt(s.max_response_tokens || "[rollout]'s")}</td>` +
        `<td class="num">${fmt(s.max_turns || "[rollout]'s")}</td>` +
        `<td>${fmt(s.filter_solved)}</td></tr>`).join("") + "</table>";
    html += `<details><summary>config.json</summary><pre class="code">` +
      `${esc(JSON.stringify(src.config, null, 1))}</pre></details>`;
    const trainSets = new Map(src.sets.filter((s) => s.source === "train").map((s) => [s.step, s.id]));
    const linkOf = (step) => (trainSets.has(step) ? `#/set/${trainSets.get(step)}` : null);
    html += `<h3>Curves</h3><div class="charts">` +
      CHARTS.map(([title, series]) =>
        chart(title, src.metrics, series, linkOf, [0, src.total_steps])).join("") + "</div>";
  }
  html += `<h3>Recorded rollouts</h3>${setsTable(src.sets)}</section>`;
  return html;
}

async function runPage() {
  setCrumbs([["runs", null]]);
  const sources = await get("/api/sources");
  const running = sources.some((s) => s.status === "running");
  statusLine.textContent = running ? "following the run (every 3 s)" : "";
  const picked = new Set([...document.querySelectorAll(".pick:checked")].map((e) => e.value));
  main.innerHTML = `<div class="filters"><button id="compare" disabled>compare the two picked</button>` +
    `<span class="muted">pick two recorded sets (steps, evaluations, eval files) to see them side by side</span></div>` +
    sources.map(sourceSection).join("");
  const button = document.getElementById("compare");
  const boxes = [...document.querySelectorAll(".pick")];
  const update = () => {
    const on = boxes.filter((b) => b.checked).map((b) => b.value);
    button.disabled = on.length !== 2;
    button.onclick = () => { location.hash = `#/compare/${on[0]}/${on[1]}`; };
  };
  boxes.forEach((b) => { b.checked = picked.has(b.value); b.onchange = update; });
  update();
  if (running) timer = setTimeout(route, 3000);
}

// --- a set of rollouts ------------------------------------------------------------------------

const FILTERS = {
  all: () => true,
  correct: (r) => r.correct,
  wrong: (r) => !r.correct,
  truncated: (r) => r.truncated,
  "failed calls": (r) => r.failed_calls > 0,
  "kept by RoC": (r) => r.kept === true,
};
const COLUMNS = [
  ["i", "#"], ["group", "group"], ["sample", "sample"], ["reward", "reward"],
  ["answer", "answer"], ["reference", "reference"], ["finish_reason", "finish"],
  ["turns", "turns"], ["tool_calls", "calls"], ["failed_calls", "failed"],
  ["response_tokens", "tokens"], ["kept", "RoC"], ["problem", "problem"],
];
const view = { filter: "all", group: "", sort: "i", desc: false };

function cell(key, r, sid) {
  const v = r[key];
  if (key === "i") return `<a href="#/rollout/${sid}/${r.i}">${r.i}</a>`;
  if (key === "finish_reason") return r.truncated ? tag(v, "warn") : esc(v);
  if (key === "failed_calls") return v ? tag(v, "bad") : "0";
  if (key === "kept") return v === true ? tag("kept", "kept") : v === false ? "-" : "";
  if (key === "problem") return esc(String(v).slice(0, 80));
  return esc(fmt(v));
}

function rowsTable(rows, sid) {
  const groups = [...new Set(rows.map((r) => String(r.group)))];
  const shown = rows.filter(FILTERS[view.filter])
    .filter((r) => view.group === "" || String(r.group) === view.group);
  const key = view.sort, sign = view.desc ? -1 : 1;
  shown.sort((a, b) => (a[key] > b[key] ? sign : a[key] < b[key] ? -sign : a.i - b.i));
  const buttons = Object.keys(FILTERS).map((f) =>
    `<button data-filter="${f}" class="${f === view.filter ? "on" : ""}">${esc(f)}</button>`).join("");
  const select = `<label>group <select id="group"><option value="">all</option>` +
    groups.map((g) => `<option ${g === view.group ? "selected" : ""}>${esc(g)}</option>`).join("") +
    "</select></label>";
  const head = COLUMNS.map(([k, label]) =>
    `<th data-sort="${k}">${esc(label)}${k === key ? (view.desc ? " &#9660;" : " &#9650;") : ""}</th>`).join("");
  const body = shown.map((r) => `<tr class="${r.correct ? "correct" : "wrong"}">` +
    COLUMNS.map(([k]) => `<td class="${typeof r[k] === "number" ? "num" : ""}">${cell(k, r, sid)}</td>`).join("") +
    "</tr>").join("");
  return `<div class="filters">${buttons}${select}<span id="count" class="muted">` +
    `${shown.length} of ${rows.length} rollouts</span></div>` +
    `<table id="rollouts"><tr>${head}</tr>${body}</table>`;
}

const STEP_KEYS = ["reward_mean", "mixed_group_fraction", "groups_kept", "trained_rollouts",
  "response_tokens_mean", "tool_calls_mean", "tool_error_ratio_correct", "approx_kl", "step_s"];

function stepMetrics(row) {
  if (!row) return "";
  return `<p id="step-metrics">${STEP_KEYS.filter((k) => k in row)
    .map((k) => tag(`${k} ${fmt(row[k])}`)).join(" ")}</p>`;
}

async function setPage(sid) {
  const data = await get(`/api/set/${sid}`);
  setCrumbs([["runs", "#/"], [data.set.label, null]]);
  const draw = () => {
    main.innerHTML = `<h2>${esc(data.set.label)}</h2>` +
      `<p>${data.set.rollouts} rollouts, ${data.set.correct} correct, ` +
      `${data.set.with_failed_calls} with a failed tool call.</p>` + stepMetrics(data.metrics) +
      rowsTable(data.rows, sid);
    main.querySelectorAll("[data-filter]").forEach((b) => {
      b.onclick = () => { view.filter = b.dataset.filter; draw(); };
    });
    main.querySelectorAll("[data-sort]").forEach((th) => {
      th.onclick = () => {
        view.desc = view.sort === th.dataset.sort ? !view.desc : false;
        view.sort = th.dataset.sort;
        draw();
      };
    });
    document.getElementById("group").onchange = (e) => { view.group = e.target.value; draw(); };
  };
  draw();
}

// --- one rollout ------------------------------------------------------------------------------

function verdict(rec) {
  const reward = Number(rec.reward || 0);
  const truncated = ["budget", "turns", "abort", "prompt_too_long"].includes(rec.finish_reason);
  let why;
  if (truncated) why = `truncated (${rec.finish_reason}): scored 0 without checking the answer`;
  else if (rec.answer === null || rec.answer === undefined) why = "no answer found (no \\boxed{} value)";
  else if (reward > 0) why = `the answer ${rec.answer} matches the reference ${rec.reference}`;
  else why = `the answer ${rec.answer} does not match the reference ${rec.reference}`;
  const extra = [rec.reward_status && `reward status: ${rec.reward_status}`,
    rec.infra_failure && `infrastructure failure: ${rec.infra_failure} (not trained on)`]
    .filter(Boolean).map(esc).join("; ");
  return `<div class="verdict ${reward > 0 ? "correct" : "wrong"}" id="verdict">` +
    `<b>reward ${fmt(reward)}</b>: ${esc(why)}${extra ? `<br><span class="muted">${extra}</span>` : ""}</div>`;
}

function turnsHtml(turns) {
  if (!turns.length) return "<p class='muted'>No response.</p>";
  return turns.map((t, k) => {
    if (t.role === "tool") {
      return `<div class="turn tool ${t.failed ? "failed" : ""}"><div class="who">tool response` +
        `${t.failed ? " " + tag("failed", "bad") : " " + tag("ok", "ok")}</div><pre>${esc(t.text)}</pre></div>`;
    }
    let call = "";
    if (t.call) {
      call = t.call_error
        ? `<div class="call malformed"><div class="who">malformed tool call: ${esc(t.call_error)}</div><pre>${esc(t.call)}</pre></div>`
        : `<div class="call"><div class="who">tool call: python</div><pre>${esc(t.code)}</pre>` +
          `${t.input ? `<div class="who">stdin</div><pre>${esc(t.input)}</pre>` : ""}</div>`;
    }
    return `<div class="turn assistant"><div class="who">assistant, turn ${k / 2 + 1}</div>` +
      `<pre>${esc(t.text)}</pre>${call}</div>`;
  }).join("");
}

function meta(rec) {
  const lp = rec.logprob || {};
  return [`finish: ${rec.finish_reason}`, `turns: ${rec.turns}`,
    `tool calls: ${rec.tool_calls} (${(rec.tool_errors || 0) + (rec.tool_timeouts || 0)} failed)`,
    `response tokens: ${rec.response_tokens ?? ""}`,
    lp.tokens ? `behaviour log-prob: mean ${fmt(lp.mean)}, min ${fmt(lp.min)} over ${lp.tokens} tokens` : "",
    rec.policy_versions && rec.policy_versions.length ? `policy versions: ${rec.policy_versions.join(", ")}` : "",
  ].filter(Boolean).map((s) => tag(s)).join(" ");
}

async function rolloutPage(sid, i) {
  const data = await get(`/api/rollout/${sid}/${i}`);
  const rec = data.record;
  setCrumbs([["runs", "#/"], [data.set.label, `#/set/${sid}`], [`rollout ${i}`, null]]);
  const kept = rec.kept === true ? tag("kept by RoC (trained on)", "kept")
    : rec.kept === false ? tag("not kept by RoC") : "";
  const group = data.group.map((r) => `<tr class="${r.correct ? "correct" : "wrong"}">` +
    `<td>${r.i === i ? "<b>this</b>" : `<a href="#/rollout/${sid}/${r.i}">${r.i}</a>`}</td>` +
    `<td class="num">${r.sample}</td><td class="num">${fmt(r.reward)}</td><td>${esc(fmt(r.answer))}</td>` +
    `<td>${esc(r.finish_reason)}</td><td class="num">${r.failed_calls}/${r.tool_calls}</td>` +
    `<td>${r.kept === true ? tag("kept", "kept") : r.kept === false ? "-" : ""}</td></tr>`).join("");
  const prev = i > 0 ? `<a href="#/rollout/${sid}/${i - 1}">&larr; previous</a>` : "";
  const next = i + 1 < data.set.rollouts ? `<a href="#/rollout/${sid}/${i + 1}">next &rarr;</a>` : "";
  main.innerHTML = `<p>${prev} ${next}</p><h2>Rollout ${i}: group ${esc(fmt(rec.group ?? rec.prompt_id))}, ` +
    `sample ${rec.sample} ${kept}</h2>` +
    `<div class="turn"><div class="who">problem</div><pre>${esc(rec.problem || rec.prompt_id || "")}</pre>` +
    `<div class="who">reference answer: ${esc(rec.reference)}</div></div>` + verdict(rec) +
    `<p>${meta(rec)}</p><h3>Conversation</h3><div id="conversation">${turnsHtml(rec.conversation)}</div>` +
    `<h3>Its group (the same prompt's rollouts)</h3><table id="group"><tr><th>rollout</th><th>sample</th>` +
    `<th>reward</th><th>answer</th><th>finish</th><th>failed/calls</th><th>RoC</th></tr>${group}</table>`;
}

// --- side by side -----------------------------------------------------------------------------

async function comparePage(a, b, open) {
  const data = await get(`/api/compare/${a}/${b}`);
  setCrumbs([["runs", "#/"], [`${data.a.label} vs ${data.b.label}`, null]]);
  const rows = data.problems.map((p, k) => `<tr class="${k === open ? "correct" : ""}">` +
    `<td><a href="#/compare/${a}/${b}/${k}">${k}</a></td><td>${esc(p.problem.slice(0, 90))}</td>` +
    `<td>${esc(p.reference)}</td><td class="num">${fmt(p.a_accuracy, 2)}</td>` +
    `<td class="num">${fmt(p.b_accuracy, 2)}</td></tr>`).join("");
  let html = `<h2>${esc(data.a.label)} (A) vs ${esc(data.b.label)} (B)</h2>` +
    `<p>${data.problems.length} problems in both.</p>`;
  if (open !== null && data.problems[open]) {
    const p = data.problems[open];
    const [ra, rb] = await Promise.all([
      get(`/api/rollout/${a}/${p.a[0].i}`), get(`/api/rollout/${b}/${p.b[0].i}`)]);
    const side = (label, sid, d, rowsOf) => `<div><h3>${esc(label)}: ` +
      rowsOf.map((r) => `<a href="#/rollout/${sid}/${r.i}">${r.correct ? "&#10003;" : "&#10007;"}</a>`).join(" ") +
      `</h3>${verdict(d.record)}${turnsHtml(d.record.conversation)}</div>`;
    html += `<div class="turn"><div class="who">problem ${open}</div><pre>${esc(p.problem)}</pre></div>` +
      `<div class="side" id="side">${side(`A, ${data.a.label}`, a, ra, p.a)}${side(`B, ${data.b.label}`, b, rb, p.b)}</div>`;
  }
  html += `<h3>Problems</h3><table id="problems"><tr><th>#</th><th>problem</th><th>reference</th>` +
    `<th>A correct</th><th>B correct</th></tr>${rows}</table>`;
  main.innerHTML = html;
}

// --- routing ----------------------------------------------------------------------------------

async function route() {
  clearTimeout(timer);
  const parts = location.hash.replace(/^#\/?/, "").split("/").filter(Boolean);
  try {
    if (parts[0] === "set") await setPage(parts[1]);
    else if (parts[0] === "rollout") await rolloutPage(parts[1], Number(parts[2]));
    else if (parts[0] === "compare") {
      await comparePage(parts[1], parts[2], parts.length > 3 ? Number(parts[3]) : null);
    } else await runPage();
  } catch (e) {
    main.innerHTML = `<p class="verdict wrong">${esc(e.message)}</p>`;
  }
}
window.addEventListener("hashchange", () => {
  Object.assign(view, { filter: "all", group: "", sort: "i", desc: false });
  route();
});
route();
