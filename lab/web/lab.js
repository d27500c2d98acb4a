// The stockguard lock lab: one event stream per storefront instance, merged into one
// timeline; lanes, log, verdict and the drawn timeline (timeline.js) come from it. Plain DOM,
// no framework.
import { model, draw } from './timeline.js';

const $ = (id) => document.getElementById(id);
const esc = (s) => String(s).replace(/[&<>"]/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;' })[c]);

const lab = { instances: [], lease: 3000, items: [], stats: new Map(), statsAt: 0 };
let events = [];        // every event received, in time order, each with .inst
let skew = Infinity;    // browser clock minus server clock (ms)
let run = null;         // the last run: {start, end, before}
let tlWindow = null;    // the timeline's window: {from, to}; to null while a run runs
let replayAt = null;    // null: live; else the instant shown (server ms)
const pauses = [];      // {inst, from, to}: SIGSTOPped instances
const kills = [];       // {inst, item, token, at}: SIGKILLed holders (their instances started again)
const streams = new Map(); // instance index -> its EventSource

const base0 = () => lab.instances[0].base;
const now = () => Date.now() - (skew === Infinity ? 0 : skew);
const clock = (t) => new Date(t).toISOString().slice(11, 23);

async function api(path, opts = {}) {
  const headers = { 'Content-Type': 'application/json', ...(opts.headers || {}) };
  const token = $('token').value.trim(); // asked for when the lab listens beyond loopback
  if (token) headers.Authorization = `Bearer ${token}`;
  const res = await fetch(path, { ...opts, headers });
  const body = await res.json().catch(() => null);
  if (!res.ok) throw new Error(body?.error ? `${body.error.code}: ${body.error.message}` : `${res.status} ${res.statusText}`);
  return body;
}

function say(text) { $('status').textContent = text; }

// ---- the event streams ----------------------------------------------------------------
// connect opens instance inst's stream (closing one already open) and resolves once its hello
// came. A stream the server ended with an error (an instance killed, or started again and not
// listening yet) is opened again after half a second: the instance's index stays, its process
// changes.
function connect(inst) {
  streams.get(inst.index)?.close();
  const es = new EventSource(`${inst.base}/api/events`);
  streams.set(inst.index, es);
  let hello;
  const said = new Promise((resolve) => { hello = resolve; });
  es.onmessage = (m) => {
    const ev = JSON.parse(m.data);
    ev.inst = inst.index;
    if (ev.kind === 'hello') { skew = Math.min(skew, Date.now() - ev.t); hello(); return; }
    if (ev.missed) say(`instance ${inst.index} missed ${ev.missed} events (the page fell behind)`);
    let i = events.length; // streams are merged in time order; most events arrive in order
    while (i > 0 && events[i - 1].t > ev.t) i--;
    events.splice(i, 0, ev);
    if (replayAt === null) logEvent(ev, i === events.length - 1);
    if (ev.kind === 'order') scheduleStats();
  };
  es.onerror = () => {
    if (streams.get(inst.index) !== es) return;
    if (es.readyState === EventSource.CLOSED) setTimeout(() => { if (streams.get(inst.index) === es) connect(inst); }, 500);
  };
  return said;
}

// showInstances writes the instances and the lease under the title.
function showInstances() {
  const n = lab.instances.length;
  $('instances').innerHTML = `${n} instance${n > 1 ? 's' : ''}: ` + lab.instances.map((i) =>
    `<span class="inst i${i.index % 6}">i${i.index}</span> pid ${i.pid}`).join(', ') + `; lease ${lab.lease / 1000} s.`;
}

// refreshInstances reads the instances again (a killed one has a new process).
async function refreshInstances() {
  const info = await api('/api/lab');
  lab.instances = info.instances; lab.lease = info.lease_ms;
  showInstances();
}

// ensureLease starts the instances again with the lease leaseMS when theirs differs (a
// storefront takes its lease at start), then opens their streams again and waits for their
// hellos, so that the run's events are all seen.
async function ensureLease(leaseMS) {
  if (!lab.pause || leaseMS === lab.lease) return;
  say(`starting the instances again with a lease of ${leaseMS / 1000} s…`);
  const res = await api('/api/lab/lease', { method: 'POST', body: JSON.stringify({ lease_ms: leaseMS }) });
  lab.lease = res.lease_ms; lab.instances = res.instances;
  showInstances();
  const timeout = new Promise((resolve) => { setTimeout(resolve, 5000); });
  await Promise.race([Promise.all(lab.instances.map(connect)), timeout]);
  say(`the instances run with a lease of ${lab.lease / 1000} s`);
}

let statsTimer = 0;
function scheduleStats() { clearTimeout(statsTimer); statsTimer = setTimeout(loadStats, 300); }
async function loadStats() {
  const stats = await api(`${base0()}/api/stats`);
  lab.stats = new Map(stats.map((s) => [s.item_id, s]));
  lab.statsAt = now();
}

// ---- lanes: the state of each item at instant T, folded from the events ------------------
function laneState(item, T) {
  const holds = new Map(); const waiting = new Map();
  const base = (run && replayAt !== null ? run.before : lab.stats).get(item.id);
  const fromT = run && replayAt !== null ? run.start : lab.statsAt;
  let stock = base?.stock ?? item.stock, sold = base?.sold_units ?? 0;
  const killAt = (inst, since) => kills.find((k) => k.inst === inst && k.at >= since && k.at <= T)?.at;
  for (const ev of events) {
    if (ev.t > T) break;
    if (ev.item !== item.id) continue;
    const key = `${ev.inst}:${ev.lock || ''}:${ev.token}`;
    switch (ev.kind) {
      case 'acquire': holds.set(key, { inst: ev.inst, token: ev.token, lock: ev.lock || '', lease: ev.lease_ms || lab.lease, since: ev.t, renewed: ev.t, renewals: 0 }); break;
      case 'crash': holds.set(`${key}:crash`, { inst: ev.inst, token: 0, lock: ev.lock || '', lease: Infinity, since: ev.t, renewed: ev.t, renewals: 0, crash: true }); break;
      case 'renew': { const h = holds.get(key); if (h) { h.renewed = ev.t; h.renewals++; } break; }
      case 'release': holds.delete(key); break;
      case 'lost': { const h = holds.get(key); if (h) h.lostAt = ev.t; break; }
      case 'wait': waiting.set(ev.inst, (waiting.get(ev.inst) || 0) + 1); break;
      case 'wait_end': waiting.set(ev.inst, Math.max(0, (waiting.get(ev.inst) || 0) - 1)); break;
      case 'order': if (ev.t > fromT) { sold += ev.quantity; stock = ev.remaining; } break;
    }
  }
  for (const [k, h] of holds) {
    h.killedAt = killAt(h.inst, h.since);
    if (h.lostAt && T - h.lostAt > 1500) holds.delete(k);
    if (h.killedAt && T - (h.renewed + h.lease) > 1500) holds.delete(k);
  }
  for (const k of kills) if (k.at <= T && k.at >= (run?.start ?? 0)) waiting.delete(k.inst);
  const initial = base?.initial_stock ?? item.stock;
  return { holds: [...holds.values()], waiting, stock, sold, initial, oversold: Math.max(0, sold - initial) };
}

function pausedAt(inst, T) { return pauses.some((p) => p.inst === inst && p.from <= T && T < p.to); }

function holdHTML(h, T) {
  if (h.crash) {
    return `<li class="i${h.inst % 6}"><span class="inst">i${h.inst}</span> <span class="text"><span class="bad">CRASHED</span> holding the ${esc(h.lock)} lock:
      its key has no TTL (Reset deletes it)</span></li>`;
  }
  const left = h.renewed + h.lease - T;
  const pct = Math.max(0, Math.min(100, (100 * left) / h.lease));
  let text = `${(Math.max(0, left) / 1000).toFixed(1)} s of lease left`;
  if (h.renewals) text += ` · <span class="renewed">renewed ×${h.renewals}</span>`;
  if (h.lostAt) text = '<span class="bad">LOST</span>: the lease ran out or another holder took it';
  else if (h.killedAt) text = `<span class="bad">KILLED</span> (kill -9): ${(Math.max(0, left) / 1000).toFixed(1)} s of its lease left in Redis`;
  else if (left <= 0) text = '<span class="bad">LEASE EXPIRED</span>: the holder has not noticed yet';
  if (pausedAt(h.inst, T)) text += ' · <span class="bad">PAUSED</span> (SIGSTOP)';
  return `<li class="i${h.inst % 6}"><span class="inst">i${h.inst}</span> <span class="text">holds ${h.lock ? `the ${esc(h.lock)} lock, ` : ''}token ${h.token}: ${text}</span>
    <span class="bar" role="img" aria-label="lease ${Math.round(pct)}% left"><span style="width:${pct}%"></span></span></li>`;
}

function renderLanes() {
  const T = replayAt ?? now();
  const chosen = Number($('item').value);
  $('lanes').innerHTML = lab.items.map((item) => {
    const s = laneState(item, T);
    const waiters = [...s.waiting].filter(([, n]) => n > 0).map(([i, n]) => `<span class="inst i${i % 6}">i${i}</span> ×${n}`).join(' · ') || 'none';
    const over = s.oversold > 0 ? ` · <span class="bad">OVERSOLD +${s.oversold}</span>` : '';
    return `<article class="lane${item.id === chosen ? ' chosen' : ''}" aria-label="item ${item.id}">
      <h3>#${item.id} ${esc(item.name)}</h3>
      <p>stock ${s.stock} of ${s.initial} · sold ${s.sold}${over}</p>
      <ul class="holders">${s.holds.map((h) => holdHTML(h, T)).join('') || '<li>lock free</li>'}</ul>
      <p>waiting for the lock: ${waiters}</p></article>`;
  }).join('');
  $('clock').textContent = replayAt === null ? 'live' : `replay at ${clock(T)} (+${((T - run.start) / 1000).toFixed(2)} s)`;
  renderTimeline();
}

// ---- the drawn timeline of the last run (timeline.js) ------------------------------------
let drawn = '';
function renderTimeline() {
  if (!tlWindow) return;
  const to = tlWindow.to ?? now();
  const T = replayAt ?? to;
  const box = $('timeline-box');
  const key = `${T}|${to}|${events.length}|${pauses.length}|${kills.length}|${box.clientWidth}`;
  if (key === drawn) return;
  drawn = key;
  const m = model(events, tlWindow.from, T, lab.lease, pauses, kills);
  const { x } = draw(m, to, { box, labels: $('timeline-labels'), summary: $('timeline-summary') });
  const off = ((T - tlWindow.from) / 1000).toFixed(2);
  $('timeline-clock').textContent = replayAt === null ? (tlWindow.to === null ? `live, +${off} s` : `the whole run, ${off} s`) : `replay at +${off} s`;
  if (replayAt !== null) { // keep the replay's instant in sight
    const cx = x(T);
    if (cx < box.scrollLeft + 20 || cx > box.scrollLeft + box.clientWidth - 20) box.scrollLeft = Math.max(0, cx - box.clientWidth / 2);
  }
}
function startWindow() { tlWindow = { from: now() - 50, to: null }; drawn = ''; }
function endWindow(startedMS, endedMS, before) {
  run = { start: startedMS - 50, end: endedMS + 50, before };
  tlWindow = { from: run.start, to: run.end };
  $('scrub').min = run.start; $('scrub').max = run.end; $('scrub').value = run.end;
  $('scrub').disabled = false;
  drawn = '';
  renderTimeline(); // the whole run at once, before the verdict is shown
}

// ---- the event log ----------------------------------------------------------------------
const lk = (ev) => (ev.lock ? ` (${esc(ev.lock)} lock)` : '');
function describe(ev) {
  const item = ev.item ? ` item ${ev.item}` : '';
  switch (ev.kind) {
    case 'acquire': return `acquire${lk(ev)}${item} token ${ev.token} (waited ${Math.round(ev.waited_ms || 0)} ms${ev.lock ? `, fixed lease ${ev.lease_ms} ms` : ''})`;
    case 'renew': return `renew${item} token ${ev.token}`;
    case 'release': return `release${lk(ev)}${item} token ${ev.token} (held ${Math.round(ev.held_ms || 0)} ms)${ev.message ? ': <span class="bad">' + esc(ev.message) + '</span>' : ''}`;
    case 'crash': return `<span class="bad">CRASH</span>${lk(ev)}${item}: the holder died between SETNX and EXPIRE; the key has no TTL`;
    case 'stall_end': return `stall over${item}: the holder goes on to its write`;
    case 'lost': return `<span class="bad">LOST</span>${item} token ${ev.token}`;
    case 'wait': return `wait for the lock of${item} (${esc(ev.strategy)})`;
    case 'wait_end': return `wait over${item}${ev.message ? ': ' + esc(ev.message) : ''}`;
    case 'stall': return `<span class="bad">STALL</span>${item}: holder stops before its write for ${Math.round(ev.stall_ms)} ms`;
    case 'order': return `order ${ev.order_id} written${item} ×${ev.quantity} token ${ev.token || '-'}, stock now ${ev.remaining} (${esc(ev.strategy)})`;
    case 'fence_refused': return `<span class="bad">FENCE REFUSED</span>${item}: token ${ev.token} is stale, the database has seen ${ev.seen}; nothing written`;
    case 'sold_out': return `sold out${item} (${esc(ev.strategy)})`;
    case 'error': return `<span class="bad">ERROR</span>${item}: ${esc(ev.message || '')}`;
    default: return esc(ev.kind);
  }
}

const logMax = 400;
function logRow(ev) {
  const li = document.createElement('li');
  li.className = `i${ev.inst % 6}`;
  li.dataset.kind = ev.kind;
  li.dataset.t = ev.t;
  li.innerHTML = `<time>${clock(ev.t)}</time> <span class="inst">i${ev.inst}</span> ${describe(ev)}`;
  return li;
}
function logEvent(ev, newest) {
  if (!newest) return renderLog(); // arrived out of order: redraw
  $('log').prepend(logRow(ev));
  while ($('log').children.length > logMax) $('log').lastChild.remove();
}
function renderLog() {
  const T = replayAt ?? Infinity;
  const shown = events.filter((ev) => ev.t <= T).slice(-logMax).reverse();
  $('log').replaceChildren(...shown.map(logRow));
}

// ---- controls ---------------------------------------------------------------------------
function fillItems(items) {
  lab.items = items;
  const keep = $('item').value;
  $('item').innerHTML = items.map((it) => `<option value="${it.id}">#${it.id} ${esc(it.name)} (${it.stock} in stock)</option>`).join('');
  if (items.some((it) => String(it.id) === keep)) $('item').value = keep;
}

async function doRun(e) {
  e.preventDefault();
  const f = new FormData($('controls'));
  const req = {
    strategy: f.get('strategy'), buyers: Number(f.get('buyers')), work_ms: Number(f.get('work')),
    quantity: Number(f.get('quantity')), item: Number(f.get('item')), fault: f.get('fault'),
  };
  $('run').disabled = true;
  const what = `${req.buyers} buyers, ${req.strategy}${req.fault ? ', fault ' + req.fault : ''}`;
  $('verdict').className = 'verdict running';
  $('verdict').textContent = `Running: ${what}… the verdict follows when every buyer has its answer.`;
  say('');
  try {
    await ensureLease(Number(f.get('lease')) * 1000);
    goLive();
    startWindow();
    await loadStats();
    const before = new Map(lab.stats); // the lanes' starting point when the run is replayed
    const res = await api('/api/lab/run', { method: 'POST', body: JSON.stringify(req) });
    if (res.paused) pauses.push({ inst: res.paused.instance, from: res.paused.at_ms, to: res.paused.at_ms + res.paused.for_ms });
    addKills(res.killed);
    endWindow(res.started_ms, res.ended_ms, before);
    showVerdict(res);
    say(res.note || '');
  } catch (err) {
    if (tlWindow && tlWindow.to === null) tlWindow.to = now();
    $('verdict').className = 'verdict bad';
    $('verdict').textContent = `Run failed: ${err.message}`;
    say(`run failed: ${err.message}`);
  } finally {
    $('run').disabled = false;
    await loadStats();
    fillItems(await api(`${base0()}/api/items`));
  }
}

function verdictHTML(r) {
  const safe = r.verdict === 'SAFE';
  const answers = Object.entries(r.answers).map(([k, n]) => `${k} ${n}`).join(', ');
  const killed = (r.killed || []).map((k) => ` · killed i${k.instance} (pid ${k.pid}, token ${k.token}), started again; ` +
    (r.gap_ms != null ? `first sale of another instance ${(r.gap_ms / 1000).toFixed(2)} s after the kill` : 'no other instance sold after the kill')).join('');
  return `<span class="${safe ? 'safe-word' : 'bad-word'}">${esc(r.verdict)}</span> · ${esc(r.strategy)}, ` +
    `${r.buyers} buyers × ${r.quantity} of item ${r.item}${r.fault ? `, fault ${esc(r.fault)}` : ''}: ` +
    `sold ${r.sold} from a stock of ${r.stock_before} (now ${r.stock_after}), oversold ${r.oversold}, ` +
    `lost updates ${r.lost_updates} · answers: ${esc(answers)}${killed}`;
}

function showVerdict(r) {
  $('verdict').className = `verdict ${r.verdict === 'SAFE' ? 'safe' : 'bad'}`;
  $('verdict').innerHTML = verdictHTML(r);
  document.body.dataset.runs = Number(document.body.dataset.runs || 0) + 1;
}

// addKills records the holders killed (for the lanes and the timeline) and, once the killed
// instances are started again, reads their new processes.
function addKills(list) {
  if (!list || !list.length) return;
  for (const k of list) kills.push({ inst: k.instance, item: k.item, token: k.token, at: k.at_ms, leaseEnd: k.lease_end_ms });
  setTimeout(() => refreshInstances().catch(() => {}), 3000);
}

// The kill lesson: lock+guard on A (the chosen item) and lock on B (the next one), at once;
// both holders killed with SIGKILL as soon as both hold.
async function doTakeover(e) {
  e.preventDefault();
  const a = Number($('item').value);
  const ids = lab.items.map((it) => it.id);
  const b = ids[(ids.indexOf(a) + 1) % ids.length];
  const req = { items: [a, b], buyers: Number($('buyers').value), work_ms: Number($('work').value), quantity: Number($('quantity').value) };
  $('takeover-run').disabled = true;
  $('takeover-verdict').className = 'verdict running';
  $('takeover-verdict').textContent = 'Running: lock+guard and lock, then kill -9 of their holders… the verdicts follow when every buyer has its answer.';
  try {
    await ensureLease(Number($('takeover-lease').value) * 1000);
    goLive();
    startWindow();
    await loadStats();
    const before = new Map(lab.stats);
    const r = await api('/api/lab/takeover', { method: 'POST', body: JSON.stringify(req) });
    addKills(r.killed);
    endWindow(r.started_ms, r.ended_ms, before);
    $('takeover-verdict').className = `verdict ${r.runs.every((x) => x.verdict === 'SAFE') ? 'safe' : 'bad'}`;
    $('takeover-verdict').innerHTML = `lease ${r.lease_ms / 1000} s${r.note ? ' · ' + esc(r.note) : ''}<ul>` +
      r.runs.map((x) => `<li data-strategy="${esc(x.strategy)}">${verdictHTML(x)}</li>`).join('') + '</ul>';
  } catch (err) {
    if (tlWindow && tlWindow.to === null) tlWindow.to = now();
    $('takeover-verdict').className = 'verdict bad';
    $('takeover-verdict').textContent = `Kill lesson failed: ${err.message}`;
  } finally {
    document.body.dataset.takeoverRuns = Number(document.body.dataset.takeoverRuns || 0) + 1;
    $('takeover-run').disabled = false;
    await loadStats();
    fillItems(await api(`${base0()}/api/items`));
  }
}

// A cart pitfall, or its fix: A is the chosen item, B the next one of the catalogue.
async function doCarts(e) {
  e.preventDefault();
  const [kase, strategy] = $('cart-case').value.split(' ');
  const a = Number($('item').value);
  const ids = lab.items.map((it) => it.id);
  const b = ids[(ids.indexOf(a) + 1) % ids.length];
  const req = { case: kase, strategy, items: kase === 'cart-order' ? [a, b] : [a], work_ms: Number($('work').value) };
  $('cart-run').disabled = true;
  $('cart-verdict').className = 'verdict running';
  $('cart-verdict').textContent = `Running: ${strategy}… the verdict follows when every cart has its answer.`;
  try {
    await ensureLease(Number($('lease').value) * 1000);
    goLive();
    startWindow();
    await loadStats();
    const before = new Map(lab.stats);
    const r = await api('/api/lab/carts', { method: 'POST', body: JSON.stringify(req) });
    endWindow(r.started_ms, r.ended_ms, before);
    const safe = r.verdict === 'SAFE';
    const carts = r.carts.map((c) => `{${c.map((l) => `${l.item_id}×${l.quantity}`).join(', ')}}`).join(' and ');
    const answers = Object.entries(r.answers).map(([k, n]) => `${k} ${n}`).join(', ');
    const stock = r.stock.map((s) => `item ${s.item} ${s.stock_before} → ${s.stock_after}`).join(', ');
    $('cart-verdict').className = `verdict ${safe ? 'safe' : 'bad'}`;
    $('cart-verdict').innerHTML = `<span class="${safe ? 'safe-word' : 'bad-word'}">${esc(r.verdict)}</span> · ${esc(strategy)}, ` +
      `carts ${esc(carts)}: sold ${r.sold} (${esc(stock)}), oversold ${r.oversold} · answers: ${esc(answers)}` +
      `${r.note ? ' · ' + esc(r.note) : ''}`;
  } catch (err) {
    if (tlWindow && tlWindow.to === null) tlWindow.to = now();
    $('cart-verdict').className = 'verdict bad';
    $('cart-verdict').textContent = `Cart run failed: ${err.message}`;
  } finally {
    document.body.dataset.cartRuns = Number(document.body.dataset.cartRuns || 0) + 1;
    $('cart-run').disabled = false;
    await loadStats();
    fillItems(await api(`${base0()}/api/items`));
  }
}

async function doPause() {
  const item = Number($('item').value);
  try {
    const p = await api('/api/lab/pause', { method: 'POST', body: JSON.stringify({ item }) });
    pauses.push({ inst: p.instance, from: p.at_ms, to: p.at_ms + p.for_ms });
    say(`paused instance ${p.instance} (pid ${p.pid}), holder of item ${item} with token ${p.token}, for ${p.for_ms / 1000} s`);
  } catch (err) { say(`pause: ${err.message}`); }
}

async function doKill() {
  const item = Number($('item').value);
  try {
    const k = await api('/api/lab/kill', { method: 'POST', body: JSON.stringify({ item }) });
    addKills([k]);
    say(`killed instance ${k.instance} (pid ${k.pid}), holder of item ${item} with token ${k.token}, with SIGKILL; the supervisor starts it again`);
  } catch (err) { say(`kill: ${err.message}`); }
}

async function doReset() {
  try {
    fillItems(await api(`${base0()}/api/lab/reset`, { method: 'POST', body: '{}' }));
    await loadStats();
    say('catalogue reset: three items of ten units');
  } catch (err) { say(`reset: ${err.message}`); }
}

function scrubTo() { replayAt = Number($('scrub').value); $('live').disabled = false; renderLanes(); renderLog(); }
function goLive() { replayAt = null; $('live').disabled = true; renderLanes(); renderLog(); }

function describeStrategy(list) {
  const s = list.find((x) => x.name === $('strategy').value);
  $('strategy-note').textContent = s ? `${s.name}: ${s.description}. ${s.safe ? 'Safe' : 'Unsafe'}: ${s.safety}.` : '';
  const crash = $('fault-crash');
  crash.disabled = !s || s.name !== 'setnx-expire';
  if (crash.disabled && crash.checked) document.querySelector('input[name=fault][value=""]').checked = true;
}

async function start() {
  const info = await api('/api/lab');
  lab.instances = info.instances; lab.lease = info.lease_ms; lab.pause = info.pause;
  showInstances();
  $('lease').value = info.lease_ms / 1000;
  for (const id of ['pause', 'fault-pause', 'kill', 'fault-kill', 'lease', 'takeover-lease', 'takeover-run']) $(id).disabled = !info.pause;
  $('pause-note').textContent = info.pause ? '' : info.pause_note;
  $('token-field').hidden = !info.token_required;
  const strategies = await api(`${base0()}/api/strategies`);
  $('strategy').innerHTML = strategies.map((s) =>
    `<option value="${esc(s.name)}"${s.default ? ' selected' : ''}>${esc(s.name)} (${s.safe ? 'safe' : 'unsafe'}${s.demo_only ? ', demo' : ''})</option>`).join('');
  $('strategy').onchange = () => describeStrategy(strategies);
  describeStrategy(strategies);
  fillItems(await api(`${base0()}/api/items`));
  await loadStats();
  info.instances.forEach(connect);
  $('controls').onsubmit = doRun;
  $('carts').onsubmit = doCarts;
  $('pause').onclick = doPause;
  $('kill').onclick = doKill;
  $('takeover').onsubmit = doTakeover;
  $('reset').onclick = doReset;
  $('item').onchange = renderLanes;
  addEventListener('resize', () => { drawn = ''; renderTimeline(); });
  $('scrub').oninput = scrubTo;
  $('live').onclick = goLive;
  setInterval(() => { if (replayAt === null) renderLanes(); }, 100);
  renderLanes();
  document.body.dataset.ready = 'true';
}

start().catch((err) => say(`the lab could not start: ${err.message}`));
