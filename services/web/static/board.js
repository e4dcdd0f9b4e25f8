// The web board's page: draws what the app answers (services/web/app.py) as SVG and sends
// the player's choices back. No rules live here: every position is replayed by the app.
const SVG = "http://www.w3.org/2000/svg";
const CELL = 36;
const MARGIN = 34;
const LABEL_FROM = 0.005;  // the heatmap writes the probabilities from 0.5 % up

const $ = (id) => document.getElementById(id);
const page = {
  info: null,        // /api/info
  board: null,       // {game, size, rule, komi, moves}: what the app replays
  state: null,       // /api/state's answer for `board`
  policy: null,      // /api/predict's answer for `board` (heatmap on)
  analysis: null,    // the latest Analyze report for `board`
  stream: null,      // the EventSource of the running analysis
  busy: false,
  pending: false,  // a new game's board is being fetched
  generation: 0,     // bumps on every position change: late answers for older ones are dropped
  ticket: 0,         // bumps on every action: an older action's late answer is dropped
};

function claim() { page.ticket += 1; return page.ticket; }

// ---------------------------------------------------------------------------- talking
async function api(path, body) {
  const options = body === undefined ? {} : {
    method: "POST", headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)};
  let response;
  try {
    response = await fetch(path, options);
  } catch (err) {
    throw {code: "NETWORK", message: `the web board's server did not answer (${err})`};
  }
  let data = null;
  try { data = await response.json(); } catch (err) { data = null; }
  if (!response.ok) {
    if (data && data.error) throw data.error;
    if (data && data.detail) throw {code: "INVALID_ARGUMENT", message: JSON.stringify(data.detail)};
    throw {code: `HTTP ${response.status}`, message: response.statusText};
  }
  return data;
}

function showError(err) {
  const box = $("error");
  if (!err) { box.hidden = true; box.textContent = ""; return; }
  box.hidden = false;
  box.textContent = `${err.code || "ERROR"}: ${err.message || err}`;
  if (err.hint) {
    const hint = document.createElement("span");
    hint.className = "hint";
    hint.textContent = err.hint;
    box.appendChild(hint);
  }
}

function setModel(model) {
  if (model) $("model").textContent = `${model.name} v${model.version}`;
}

// ---------------------------------------------------------------------------- drawing
function el(name, attrs, parent) {
  const node = document.createElementNS(SVG, name);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (parent) parent.appendChild(node);
  return node;
}

function xy(index, size) {
  const x = index % size, y = Math.floor(index / size);
  return [MARGIN + x * CELL, MARGIN + (size - 1 - y) * CELL];
}

function heatColour(p, top) {
  const t = top > 0 ? p / top : 0;   // the most likely move is the hottest
  const hue = 220 - 220 * t;         // blue (cold) to red (hot)
  return `hsla(${hue.toFixed(0)}, 85%, 50%, ${(0.15 + 0.7 * t).toFixed(2)})`;
}

function percent(p) {
  const v = 100 * p;
  return v >= 10 ? v.toFixed(0) : v.toFixed(1);
}

function draw() {
  const s = page.state;
  const svg = $("board");
  svg.replaceChildren();
  if (!s) return;
  const size = s.size;
  const extent = 2 * MARGIN + (size - 1) * CELL;
  svg.setAttribute("viewBox", `0 0 ${extent} ${extent}`);
  const grid = el("g", {class: "grid"}, svg);
  for (let i = 0; i < size; i++) {
    const a = MARGIN + i * CELL, end = MARGIN + (size - 1) * CELL;
    el("line", {x1: MARGIN, y1: a, x2: end, y2: a}, grid);
    el("line", {x1: a, y1: MARGIN, x2: a, y2: end}, grid);
    const col = el("text", {x: a, y: MARGIN / 2 - 4, class: "label"}, grid);
    col.textContent = s.columns[i];
    const row = el("text", {x: MARGIN / 2 - 6, y: MARGIN + (size - 1 - i) * CELL, class: "label"}, grid);
    row.textContent = s.rows[i];
  }
  const layer = el("g", {class: "stones"}, svg);
  s.cells.forEach((c, i) => {
    if (!c) return;
    const [cx, cy] = xy(i, size);
    el("circle", {cx, cy, r: CELL * 0.46, class: `stone ${c === 1 ? "black" : "white"}`,
                  "data-point": i}, layer);
  });
  if (s.last !== null) {
    const [cx, cy] = xy(s.last, size);
    el("circle", {cx, cy, r: CELL * 0.2, class: "last"}, layer);
  }
  const marks = el("g", {class: "forbidden-points"}, svg);
  for (const [point, reason] of Object.entries(s.forbidden)) {
    const [cx, cy] = xy(Number(point), size), d = CELL * 0.22;
    const g = el("g", {class: "forbidden", "data-point": point}, marks);
    el("line", {x1: cx - d, y1: cy - d, x2: cx + d, y2: cy + d, class: "forbidden"}, g);
    el("line", {x1: cx - d, y1: cy + d, x2: cx + d, y2: cy - d, class: "forbidden"}, g);
    el("title", {}, g).textContent = `forbidden for black: ${reason}`;
  }
  if (page.policy && $("heatmap").checked) drawHeat(svg, size);
  if (page.analysis && $("analyze").checked) drawCandidates(svg, size);
  const hits = el("g", {class: "hits"}, svg);
  s.cells.forEach((c, i) => {
    const [cx, cy] = xy(i, size);
    const hit = el("circle", {cx, cy, r: CELL / 2, class: "hit", "data-point": i}, hits);
    hit.addEventListener("click", () => play(pointName(i)));
  });
}

function drawHeat(svg, size) {
  const layer = el("g", {class: "heatmap"}, svg);
  const policy = page.policy.policy;
  const top = Math.max(...policy);
  policy.forEach((p, i) => {
    if (page.state.cells[i] || p <= 0 || (p < LABEL_FROM && p < 0.01 * top)) return;
    const [cx, cy] = xy(i, size);
    el("circle", {cx, cy, r: CELL * 0.45, class: "heat", fill: heatColour(p, top),
                  "data-point": i}, layer);
    if (p >= LABEL_FROM) {
      const label = el("text", {x: cx, y: cy, class: "heat-label", "data-point": i,
                                "data-p": p}, layer);
      label.textContent = percent(p);
    }
  });
}

function drawCandidates(svg, size) {
  const layer = el("g", {class: "candidates"}, svg);
  page.analysis.candidates.forEach((c, rank) => {
    if (c.index === null) return;
    const [cx, cy] = xy(c.index, size);
    el("circle", {cx, cy, r: CELL * 0.42, class: rank === 0 ? "cand best" : "cand",
                  "data-point": c.index}, layer);
    const label = el("text", {x: cx, y: cy, class: "cand-label", "data-point": c.index}, layer);
    label.textContent = c.visits;
  });
}

function pointName(index) {
  const s = page.state;
  return s.columns[index % s.size] + s.rows[Math.floor(index / s.size)];
}

function describe() {
  const s = page.state;
  if (!s) return;
  const engine = $("engine").value;
  $("status").textContent = s.result
    ? `Game over: ${s.result}`
    : `${s.to_move} to move${engine === s.to_move ? " (engine)" : ""}`
      + (page.busy ? " — engine thinking…" : "");
  const notes = [];
  if (s.komi !== null) notes.push(`komi ${s.komi}`);
  if (s.captures) notes.push(`captures: black ${s.captures.black}, white ${s.captures.white}`);
  const forbidden = Object.keys(s.forbidden).length;
  if (forbidden) notes.push(`${forbidden} point${forbidden > 1 ? "s" : ""} forbidden for black (×)`);
  $("notes").textContent = notes.join(" · ");
  $("moves").textContent = s.moves.map((m, i) => `${i + 1}.${m}`).join(" ");
  $("pass").hidden = !s.has_pass;
  drawAnalysisTable();
}

function drawAnalysisTable() {
  const box = $("analysis");
  const a = page.analysis;
  if (!a || !$("analyze").checked) { box.replaceChildren(); return; }
  const table = document.createElement("table");
  const head = `<tr><th>move</th><th>visits</th><th>Q</th><th>prior</th><th class="pv">PV</th></tr>`;
  table.innerHTML = head;
  for (const c of a.candidates) {
    const row = table.insertRow();
    row.className = "candidate";
    for (const [text, cls] of [[c.name, ""], [c.visits, "visits"], [c.q.toFixed(3), "q"],
                               [c.prior.toFixed(3), "prior"], [c.pv.join(" "), "pv"]]) {
      const cell = row.insertCell();
      cell.textContent = text;
      if (cls) cell.className = cls;
    }
  }
  const summary = document.createElement("p");
  summary.id = "analysis-summary";
  summary.dataset.visits = a.total_visits;
  summary.textContent = `${a.final ? "final" : "searching"}: ${a.total_visits} visits, ` +
    `value ${a.value.toFixed(3)} for ${a.to_move}, ${a.elapsed_ms.toFixed(0)} ms`;
  box.replaceChildren(summary, table);
}

// ---------------------------------------------------------------------------- actions
async function setPosition(state) {
  page.generation += 1;
  page.state = state;
  page.board = {game: state.game, size: state.size, rule: state.rule, komi: state.komi,
                moves: state.moves};
  page.policy = null;
  page.analysis = null;
  stopAnalysis();
  draw();
  describe();
  await refreshOverlays();
}

async function refreshOverlays() {
  if ($("analyze").checked && !page.state.over) startAnalysis();
  await refreshHeat();
}

async function refreshHeat() {
  const generation = page.generation;
  if (!$("heatmap").checked) return;
  try {
    const policy = await api("/api/predict", page.board);
    if (generation !== page.generation) return;
    page.policy = policy;
    setModel(policy.model);
    draw();
  } catch (err) { showError(err); }
}

async function play(name) {
  if (page.busy || page.pending || !page.state || page.state.over) return;
  showError(null);
  const ticket = claim();
  const board = {...page.board, moves: [...page.board.moves, name]};
  let state;
  try {
    state = await api("/api/state", board);
  } catch (err) { if (ticket === page.ticket) showError(err); return; }
  if (ticket !== page.ticket) return;
  await setPosition(state);
  await engineTurn();
}

async function engineTurn(force = false) {
  const s = page.state;
  if (page.busy || s.over || (!force && $("engine").value !== s.to_move)) return;
  const kind = $("budget-kind").value;
  const amount = Math.max(1, Number($("budget").value) || 0);
  page.busy = true;
  const ticket = claim();
  describe();
  try {
    const reply = await api("/api/genmove", {board: page.board, visits: kind === "visits" ? amount : 0,
                                             time_ms: kind === "time_ms" ? amount : 0});
    page.busy = false;
    if (ticket !== page.ticket) return;   // a new game or a loaded one meanwhile
    setModel(reply.model);
    await setPosition(reply.state);
  } catch (err) {
    page.busy = false;
    describe();
    showError(err);
  }
}

function startAnalysis() {
  stopAnalysis();
  const query = new URLSearchParams({board: JSON.stringify(page.board), every: "50",
                                     visits: "100000", time_ms: "60000"});
  const generation = page.generation;
  const stream = new EventSource(`/api/analyze?${query}`);
  page.stream = stream;
  stream.addEventListener("report", (event) => {
    if (generation !== page.generation) return;
    page.analysis = JSON.parse(event.data);
    setModel(page.analysis.model);
    draw();
    drawAnalysisTable();
  });
  stream.addEventListener("done", () => stopAnalysis());
  stream.addEventListener("failure", (event) => {
    stopAnalysis();
    showError(JSON.parse(event.data).error);
  });
  stream.onerror = () => {
    if (page.stream === stream) {
      stopAnalysis();
      showError({code: "NETWORK", message: "the analysis stream was cut"});
    }
  };
}

function stopAnalysis() {
  if (page.stream) {
    page.stream.close();   // the app sees the stream close and cancels the gRPC call
    page.stream = null;
  }
}

async function newGame() {
  const game = page.info.games.find((g) => g.name === $("game").value);
  const komi = game.default_komi === null ? null : Number($("komi").value);
  const board = {game: game.name, size: Number($("size").value), rule: $("rule").value,
                 komi, moves: []};
  showError(null);
  const ticket = claim();
  // until the new board is set, a click would play on the old one (under a rule or size the
  // controls no longer show): clicks wait, and body[data-pending] says so
  page.pending = true;
  document.body.dataset.pending = "true";
  let state;
  try {
    state = await api("/api/state", board);
  } catch (err) { showError(err); return; } finally {
    if (ticket === page.ticket) {
      page.pending = false;
      delete document.body.dataset.pending;
    }
  }
  if (ticket !== page.ticket) return;
  await setPosition(state);
  await refreshModel();
  await engineTurn();
}

async function refreshModel() {
  try {
    const reply = await api(`/api/model?game=${encodeURIComponent(page.board.game)}`);
    setModel(reply.model);
  } catch (err) {
    $("model").textContent = "unavailable";
    showError(err);
  }
}

async function undo() {
  if (page.busy || !page.board.moves.length) return;
  let moves = page.board.moves.slice(0, -1);
  // against the engine, take back its answer too, so that it is the player's turn again
  const engine = $("engine").value;
  const mover = moves.length % 2 === 0 ? "black" : "white";
  if (engine === mover && moves.length) moves = moves.slice(0, -1);
  showError(null);
  const ticket = claim();
  try {
    const state = await api("/api/state", {...page.board, moves});
    if (ticket === page.ticket) await setPosition(state);
  } catch (err) { showError(err); }
}

function fillGameOptions() {
  const game = page.info.games.find((g) => g.name === $("game").value);
  $("size").replaceChildren(...game.sizes.map((n) => new Option(`${n}×${n}`, n, false,
                                                                  n === game.default_size)));
  $("rule").replaceChildren(...game.rules.map((r) => new Option(r, r)));
  $("rule-label").hidden = !game.rules.length;
  $("komi-label").hidden = game.default_komi === null;
  if (game.default_komi !== null) $("komi").value = game.default_komi;
}

async function saveSgf() {
  try {
    const reply = await api("/api/sgf/save", page.board);
    const link = document.createElement("a");
    link.href = URL.createObjectURL(new Blob([reply.text], {type: "application/x-go-sgf"}));
    link.download = reply.filename;
    link.click();
    URL.revokeObjectURL(link.href);
  } catch (err) { showError(err); }
}

async function loadSgf(file) {
  showError(null);
  const ticket = claim();
  try {
    const reply = await api("/api/sgf/load", {text: await file.text(), game: page.board.game});
    if (ticket !== page.ticket) return;
    $("game").value = reply.board.game;
    fillGameOptions();
    $("size").value = reply.board.size;
    if (reply.board.rule) $("rule").value = reply.board.rule;
    if (reply.board.komi !== null) $("komi").value = reply.board.komi;
    $("engine").value = "none";   // a loaded game is studied, not answered
    await setPosition(reply.state);
    await refreshModel();
  } catch (err) { showError(err); }
}

async function start() {
  try {
    page.info = await api("/api/info");
  } catch (err) { showError(err); return; }
  $("target").textContent = page.info.target + (page.info.tls ? " (TLS)" : "") +
    (page.info.token ? " with token" : "");
  $("game").replaceChildren(...page.info.games.map((g) => new Option(g.title, g.name)));
  $("game").value = page.info.default_game;
  fillGameOptions();
  $("game").addEventListener("change", () => { fillGameOptions(); newGame(); });
  for (const id of ["size", "rule", "komi"]) $(id).addEventListener("change", newGame);
  $("new").addEventListener("click", newGame);
  $("undo").addEventListener("click", undo);
  $("pass").addEventListener("click", () => play("pass"));
  $("engine").addEventListener("change", () => { describe(); engineTurn(); });
  $("engine-move").addEventListener("click", () => engineTurn(true));
  $("heatmap").addEventListener("change", () => { draw(); refreshHeat(); });
  $("analyze").addEventListener("change", () => {
    if ($("analyze").checked) startAnalysis(); else { stopAnalysis(); page.analysis = null; }
    draw(); describe();
  });
  $("save").addEventListener("click", saveSgf);
  $("load").addEventListener("change", (event) => {
    if (event.target.files.length) loadSgf(event.target.files[0]);
    event.target.value = "";
  });
  await newGame();
  document.body.dataset.ready = "1";
}

start();
