// The lab's timeline of the last run: time across, one row per instance, item and lock; each
// hold a bar from its acquisition to its release, labelled with its fencing token, hatched past
// its lease's end; renewals as ticks, the loss as a cross, writes as marks (accepted or refused,
// in words and colour), stalls and SIGSTOPs as spans; where a holder still works past its lease
// while another holds the same lock, the span is highlighted and named in words. Plain SVG.
// model() folds the events (pure); draw() renders a model into the page.

const NS = 'http://www.w3.org/2000/svg';
const pitfallLocks = new Set(['setnx-expire', 'del-release', 'fixed-lease']);
const realLockStrategies = new Set(['lock', 'lock+guard', 'request-order']);

// lockOf names the lock a strategy's writes are made under: a pitfall's own lock, '' for the
// item's real lock, null for a strategy that takes no lock (its writes are not drawn).
export function lockOf(strategy) {
  if (pitfallLocks.has(strategy)) return strategy;
  return realLockStrategies.has(strategy) ? '' : null;
}

const secs = (ms) => `${(ms / 1000).toFixed(2)} s`;
const lockWords = (lock) => (lock ? `${lock} lock` : 'lock');

// model folds the events of [from, T] (each {t, inst, kind, item, token, ...}, in time order)
// into holds, rows, stalls, waits and the overlaps. leaseMS is the real lock's lease; pauses
// are the SIGSTOPs {inst, from, to}; kills the SIGKILLs {inst, item, token, at, leaseEnd}: a
// killed process tells nothing more, so its holds and waits open at the kill end there, and
// its lease is the one Redis showed at the kill (leaseEnd).
export function model(events, from, T, leaseMS, pauses = [], kills = []) {
  const holds = []; const open = new Map(); const stalls = []; const waits = []; const writes = [];
  const keyOf = (ev, lock) => `${ev.inst}|${ev.item}|${lock}`;
  const find = (ev, lock, token) => {
    const list = open.get(keyOf(ev, lock)) || [];
    if (token) return list.find((h) => h.token === token) || holds.find((h) => h.inst === ev.inst && h.item === ev.item && h.lock === lock && h.token === token);
    return list[list.length - 1];
  };
  for (const ev of events) {
    if (ev.t < from) continue;
    if (ev.t > T) break;
    const lock = ev.lock || '';
    switch (ev.kind) {
      case 'acquire': {
        const h = { inst: ev.inst, item: ev.item, lock, token: ev.token, start: ev.t, lease: ev.lease_ms || leaseMS,
          lastRenew: ev.t, renewals: [], writes: [], end: null, lostAt: null, note: '' };
        holds.push(h);
        const k = keyOf(ev, lock);
        open.set(k, [...(open.get(k) || []), h]);
        break;
      }
      case 'crash': {
        const h = { inst: ev.inst, item: ev.item, lock, token: 0, start: ev.t, lease: Infinity, lastRenew: ev.t,
          renewals: [], writes: [], end: null, lostAt: null, crash: true, note: ev.message || '' };
        holds.push(h);
        break;
      }
      case 'renew': {
        const h = find(ev, lock, ev.token);
        if (h) { h.renewals.push(ev.t); h.lastRenew = ev.t; }
        break;
      }
      case 'lost': { const h = find(ev, lock, ev.token); if (h && h.lostAt === null) h.lostAt = ev.t; break; }
      case 'release': {
        const h = find(ev, lock, ev.token);
        if (h) {
          h.end = ev.t; h.note = ev.message || '';
          const k = keyOf(ev, lock);
          open.set(k, (open.get(k) || []).filter((x) => x !== h));
        }
        break;
      }
      case 'order': case 'fence_refused': {
        const wl = lockOf(ev.strategy);
        const w = { t: ev.t, inst: ev.inst, item: ev.item, ok: ev.kind === 'order', token: ev.token, seen: ev.seen, strategy: ev.strategy };
        if (wl !== null) {
          const h = find(ev, wl, ev.token) || find(ev, wl, 0);
          if (h) { w.hold = h; h.writes.push(w); }
        }
        writes.push(w);
        break;
      }
      case 'stall': stalls.push({ inst: ev.inst, item: ev.item, from: ev.t, to: ev.t + (ev.stall_ms || 0), open: true }); break;
      case 'stall_end': {
        const s = stalls.find((x) => x.open && x.inst === ev.inst && x.item === ev.item);
        if (s) { s.to = ev.t; s.open = false; }
        break;
      }
      case 'wait': {
        const wl = lockOf(ev.strategy);
        if (wl !== null) waits.push({ inst: ev.inst, item: ev.item, lock: wl, from: ev.t, to: null });
        break;
      }
      case 'wait_end': {
        const wl = lockOf(ev.strategy);
        const w = waits.find((x) => x.to === null && x.inst === ev.inst && x.item === ev.item && x.lock === wl);
        if (w) { w.to = ev.t; w.failed = Boolean(ev.message); }
        break;
      }
      default:
    }
  }
  const dead = kills.filter((k) => k.at >= from && k.at <= T);
  const killOf = (inst, start, end) => dead.find((k) => k.inst === inst && start <= k.at && (end === null || end > k.at));
  for (const h of holds) {
    const k = killOf(h.inst, h.start, h.end);
    if (k) { h.end = k.at; h.killedAt = k.at; }
    h.stop = h.end ?? T; // an open hold is drawn up to the cursor
    h.leaseEnd = h.lastRenew + h.lease;
    // Redis's word for a killed hold's lease: a renewal the holder made just before the kill
    // may have died with it, untold.
    if (k && k.item === h.item && !h.lock && k.token === h.token && k.leaseEnd) h.leaseEnd = k.leaseEnd;
    for (const s of stalls) if (s.inst === h.inst && s.item === h.item && s.from >= h.start && s.from <= h.stop) s.hold = h;
  }
  // A holder killed before it told its acquisition (the event was still in its process, unsent)
  // holds, for the timeline, from the kill on: what Redis showed the supervisor.
  for (const k of dead) {
    if (holds.some((h) => h.killedAt === k.at && h.inst === k.inst && h.item === k.item && !h.lock)) continue;
    const leaseEnd = k.leaseEnd || k.at + leaseMS;
    holds.push({ inst: k.inst, item: k.item, lock: '', token: k.token, start: k.at, lease: leaseEnd - k.at, lastRenew: k.at,
      renewals: [], writes: [], end: k.at, stop: k.at, killedAt: k.at, leaseEnd, lostAt: null, untold: true,
      note: 'its acquisition died with it, untold' });
  }
  for (const s of stalls) s.to = Math.min(s.to, T);
  // A hold whose loss its holder learned is never told released (the release finds it lost):
  // its work ends with its last write or its stall, once no stall of it is still running.
  for (const h of holds) {
    if (h.end !== null || h.lostAt === null) continue;
    const own = stalls.filter((st) => st.hold === h);
    if (own.some((st) => st.open)) continue;
    h.stop = Math.max(h.lostAt, ...h.writes.map((w) => w.t), ...own.map((st) => st.to));
  }
  for (const w of waits) {
    const k = killOf(w.inst, w.from, w.to);
    if (k) w.to = k.at;
    w.stop = w.to ?? T;
  }
  return { from, T, holds, stalls, waits, writes, pauses: pauses.filter((p) => p.from <= T),
    overlaps: overlaps(holds), crossed: crossed(holds, waits), kills: killed(dead, holds, writes) };
}

// killed tells, for each kill, the hold it ended (the killed lock's), the next hold of the
// item's lock (the takeover, or the holder after the lease), and the item's next sale: the end
// of the sales gap. A next hold that began before the dead hold's lease end took it over.
function killed(dead, holds, writes) {
  return dead.map((k) => {
    const hold = holds.find((h) => h.killedAt === k.at && h.inst === k.inst && h.item === k.item && !h.lock && h.token === k.token) ||
      holds.find((h) => h.killedAt === k.at && h.inst === k.inst && h.item === k.item && !h.lock);
    const next = holds.filter((h) => h.item === k.item && !h.lock && h !== hold && h.start > k.at).sort((a, b) => a.start - b.start)[0];
    const sale = writes.find((w) => w.ok && w.item === k.item && w.t > k.at);
    const takeover = Boolean(hold && next && next.start < hold.leaseEnd - stampSlack);
    return { ...k, hold, next, sale, takeover };
  });
}

// overlaps finds the spans where two holds of one lock of one item run at once. Mostly a hold
// A still working past its lease's end while a later holder B holds the lock: [max(A's lease
// end, B's start), min(A's stop, B's stop)] (kind past). Else B took a lock whose key someone
// deleted while A's lease still ran (del-release's plain DEL): [B's start, min(A's stop, B's
// stop)] (kind both), with the release that deleted it, if one is seen. Lease ends are drawn
// from stamps taken after Redis answered, so they are late by up to a round trip: an overlap
// may be drawn short, never invented; one shorter than minOverlap (a release stamped just after
// the next acquire) is not counted, and a lease end drawn up to stampSlack after the next
// acquisition is taken for what let it in.
const minOverlap = 10; const stampSlack = 50;
function overlaps(holds) {
  const out = [];
  for (const a of holds) {
    if (a.crash) continue;
    for (const b of holds) {
      if (b === a || b.crash || b.item !== a.item || b.lock !== a.lock || b.start < a.start || (b.start === a.start && b.token < a.token)) continue;
      const past = b.start >= a.leaseEnd - stampSlack;
      const from = b.start; const to = Math.min(a.stop, b.stop);
      if (to - from < minOverlap) continue;
      const o = { a, b, from, to, kind: past ? 'past' : 'both' };
      if (!past) { // whose release deleted the key: a hold past its lease, released just before b took it
        o.deleter = holds.find((c) => c !== a && c !== b && c.item === a.item && c.lock === a.lock && c.end !== null &&
          c.end > c.leaseEnd && c.end <= b.start && c.end >= a.start);
      }
      out.push(o);
    }
  }
  return out.sort((x, y) => x.from - y.from);
}

// crossed finds two holders of the real lock each waiting for the item the other holds (the
// crossed carts of request-order), and for how long both waited.
function crossed(holds, waits) {
  const out = [];
  const holding = (inst, item, t) => holds.find((h) => !h.lock && h.inst === inst && h.item === item && h.start <= t && t < h.stop);
  for (let i = 0; i < waits.length; i++) {
    for (let j = i + 1; j < waits.length; j++) {
      const p = waits[i]; const q = waits[j];
      if (p.item === q.item || p.lock || q.lock) continue;
      const from = Math.max(p.from, q.from); const to = Math.min(p.stop, q.stop);
      if (to - from < minOverlap) continue;
      const hp = holding(p.inst, q.item, from); const hq = holding(q.inst, p.item, from);
      if (hp && hq && hp !== hq) out.push({ p, q, hp, hq, from, to });
    }
  }
  return out;
}

// sentences says in words what the timeline shows that matters: the overlaps, the writes
// refused by the fence or accepted late, the crashed holders, the crossed carts; past
// perKind sentences of one kind, one more sentence counts the rest.
const perKind = 5;
export function sentences(m) {
  const all = said(m); const out = []; const n = {};
  for (const s of all) {
    n[s.kind] = (n[s.kind] || 0) + 1;
    if (n[s.kind] <= perKind) out.push(s);
  }
  const words = { overlap: 'overlaps', refused: 'refused writes', late: 'late writes', crash: 'crashed holders', crossed: 'crossed carts', kill: 'kills' };
  for (const [kind, k] of Object.entries(n)) {
    if (k > perKind) out.push({ kind: `${kind}-more`, text: `and ${k - perKind} more ${words[kind]} (${k} in all)` });
  }
  return out;
}

function said(m) {
  const out = [];
  for (const k of m.kills) {
    let text = `i${k.inst} killed (kill -9) at +${secs(k.at - m.from)} holding item ${k.item}'s lock, token ${k.token}`;
    if (k.hold) text += `, its lease running to +${secs(k.hold.leaseEnd - m.from)}`;
    if (!k.next) text += `; no one has taken the lock since (${secs(m.T - k.at)})`;
    else if (k.takeover) text += `; i${k.next.inst} took it over with token ${k.next.token} at +${secs(k.next.start - m.from)}, ${secs(k.next.start - k.at)} after the kill, before that lease's end (the dead process's key was gone)`;
    else text += `; i${k.next.inst} took it with token ${k.next.token} at +${secs(k.next.start - m.from)}, ${secs(k.next.start - k.at)} after the kill, when the dead holder's lease ran out`;
    text += k.sale ? `; next sale at +${secs(k.sale.t - m.from)}: a gap of ${secs(k.sale.t - k.at)}` : '; no sale since';
    out.push({ kind: 'kill', text });
  }
  for (const o of m.overlaps) {
    if (o.kind === 'past') {
      out.push({ kind: 'overlap', text: `i${o.a.inst} still working, i${o.b.inst} holding item ${o.a.item}, for ${secs(o.to - o.from)}` +
        ` (${lockWords(o.a.lock)}: token ${o.a.token}'s lease ended at +${secs(o.a.leaseEnd - m.from)}, token ${o.b.token} took it at +${secs(o.b.start - m.from)})` });
      continue;
    }
    const why = o.deleter ? `i${o.deleter.inst}'s release of token ${o.deleter.token}, past its lease, deleted token ${o.a.token}'s key at +${secs(o.deleter.end - m.from)}` :
      `token ${o.a.token}'s key was gone before its lease ended`;
    out.push({ kind: 'overlap', text: `i${o.a.inst} holding, i${o.b.inst} holding item ${o.a.item} too, for ${secs(o.to - o.from)}` +
      ` (${lockWords(o.a.lock)}: ${why}; token ${o.b.token} took it at +${secs(o.b.start - m.from)})` });
  }
  for (const w of m.writes) {
    if (!w.ok) out.push({ kind: 'refused', text: `i${w.inst}'s write with token ${w.token} on item ${w.item} refused by the fence (the database had seen token ${w.seen}): nothing written` });
    else if (w.hold && w.t > w.hold.leaseEnd) out.push({ kind: 'late', text: `i${w.inst}'s write with token ${w.token} on item ${w.item} accepted ${secs(w.t - w.hold.leaseEnd)} after its lease ended: no fence refused it` });
  }
  for (const h of m.holds) {
    if (h.crash) out.push({ kind: 'crash', text: `i${h.inst} died holding the ${lockWords(h.lock)} of item ${h.item} between SETNX and EXPIRE: the key has no TTL, the item stays blocked` });
  }
  for (const c of m.crossed) {
    out.push({ kind: 'crossed', text: `crossed carts: i${c.p.inst} holds item ${c.q.item} and waits for item ${c.p.item}, ` +
      `i${c.q.inst} holds item ${c.p.item} and waits for item ${c.q.item}, for ${secs(c.to - c.from)}` });
  }
  return out;
}

// ---- drawing ------------------------------------------------------------------------------
const laneH = 44; const axisH = 24; const barY = 13; const barH = 14; const rowGap = 8; const rightPad = 84;

function el(name, attrs = {}, text) {
  const e = document.createElementNS(NS, name);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}
function titled(e, text) { e.append(el('title', {}, text)); return e; }

// rowsOf groups the holds into rows (instance, item, lock) and each row into lanes so that
// two holds of one row never share a lane.
function rowsOf(m) {
  const rows = new Map();
  const row = (inst, item, lock) => {
    const k = `${item}|${lock}|${inst}`;
    if (!rows.has(k)) rows.set(k, { inst, item, lock, lanes: [], waits: [], stalls: [] });
    return rows.get(k);
  };
  for (const h of [...m.holds].sort((a, b) => a.start - b.start)) {
    const r = row(h.inst, h.item, h.lock);
    let lane = r.lanes.findIndex((l) => l[l.length - 1].stop < h.start);
    if (lane < 0) { lane = r.lanes.length; r.lanes.push([]); }
    r.lanes[lane].push(h); h.lane = lane;
  }
  for (const s of m.stalls) row(s.inst, s.item, s.hold ? s.hold.lock : '').stalls.push(s);
  for (const w of m.waits) row(w.inst, w.item, w.lock).waits.push(w);
  return [...rows.values()].map((r) => ({ ...r, lanes: Math.max(1, r.lanes.length) }))
    .sort((a, b) => a.item - b.item || a.lock.localeCompare(b.lock) || a.inst - b.inst);
}

// union merges the intervals {from, stop} into disjoint [from, to] pairs.
function union(list) {
  const out = [];
  for (const w of [...list].sort((a, b) => a.from - b.from)) {
    const last = out[out.length - 1];
    if (last && w.from <= last[1]) last[1] = Math.max(last[1], w.stop);
    else out.push([w.from, w.stop]);
  }
  return out;
}

// draw renders m into box (the scrolling area), labels (the fixed column of row names) and
// summary (the words). to is the end of the axis.
export function draw(m, to, { box, labels, summary }) {
  const rows = rowsOf(m);
  const span = Math.max(1, to - m.from);
  const width = Math.max(box.clientWidth - 2, Math.round((span / 1000) * 90) + rightPad);
  const x = (t) => ((t - m.from) / span) * (width - rightPad); // room on the right for the last words
  let y = axisH;
  for (const r of rows) { r.y = y; y += r.lanes * laneH + rowGap; }
  const height = Math.max(y, axisH + laneH);
  const svg = el('svg', { width, height, viewBox: `0 0 ${width} ${height}`, 'aria-hidden': 'true', class: 'tl-svg' });
  const defs = el('defs');
  for (let i = 0; i < 6; i++) {
    const p = el('pattern', { id: `hatch${i}`, width: 6, height: 6, patternUnits: 'userSpaceOnUse', patternTransform: 'rotate(45)' });
    p.append(el('rect', { width: 6, height: 6, class: `tl-hatch-bg i${i}` }), el('line', { x1: 0, y1: 0, x2: 0, y2: 6, class: `tl-hatch i${i}` }));
    defs.append(p);
  }
  svg.append(defs);
  // The axis: a tick a second (or two) with its offset from the run's start.
  const step = span / 1000 > width / 45 ? 2000 : span > 4000 ? 1000 : 500;
  for (let t = 0; t <= span; t += step) {
    svg.append(el('line', { x1: x(m.from + t), x2: x(m.from + t), y1: axisH - 6, y2: height, class: 'tl-grid' }));
    svg.append(el('text', { x: x(m.from + t) + 2, y: axisH - 10, class: 'tl-axis' }, `+${(t / 1000).toFixed(step < 1000 ? 1 : 0)} s`));
  }
  const labelRows = [];
  for (const r of rows) {
    labelRows.push(`<div class="tl-label i${r.inst % 6}" style="height:${r.lanes * laneH + rowGap}px"><span class="inst">i${r.inst}</span> item ${r.item}` +
      `${r.lock ? `<br><small>${r.lock}</small>` : ''}</div>`);
    svg.append(el('line', { x1: 0, x2: width, y1: r.y + r.lanes * laneH + rowGap / 2, y2: r.y + r.lanes * laneH + rowGap / 2, class: 'tl-sep' }));
    for (const p of m.pauses.filter((q) => q.inst === r.inst)) {
      const px = x(p.from); const pw = Math.max(2, x(Math.min(p.to, m.T)) - px);
      svg.append(titled(el('rect', { x: px, y: r.y, width: pw, height: r.lanes * laneH, class: 'tl-pause' }), `i${r.inst} stopped by SIGSTOP`));
      svg.append(el('text', { x: px + pw - 3, y: r.y + 9, class: 'tl-note tl-end' }, 'SIGSTOP'));
    }
    const wy = r.y + r.lanes * laneH + 1;
    for (const [wf, wt] of union(r.waits)) {
      svg.append(titled(el('line', { x1: x(wf), x2: x(wt), y1: wy, y2: wy, class: `tl-wait i${r.inst % 6}` }), `i${r.inst}: buyers wait for item ${r.item}'s ${lockWords(r.lock)}`));
      if (x(wt) - x(wf) > 60 && !r.lock && !r.stalls.length) svg.append(el('text', { x: x(wf) + 2, y: wy - 3, class: 'tl-note tl-wait-text' }, 'waiting'));
    }
  }
  for (const h of m.holds) {
    const r = rows.find((q) => q.inst === h.inst && q.item === h.item && q.lock === h.lock);
    const by = r.y + h.lane * laneH + barY; const c = h.inst % 6;
    const x0 = x(h.start); const solidTo = x(Math.min(h.stop, h.leaseEnd)); const x1 = x(h.stop);
    const g = el('g', { class: `tl-hold i${c}`, 'data-token': h.token });
    if (h.crash) {
      g.append(titled(el('rect', { x: x0, y: by, width: Math.max(2, x1 - x0), height: barH, fill: `url(#hatch${c})`, class: 'tl-crash' }),
        `i${h.inst} crashed between SETNX and EXPIRE: the key has no TTL`));
      g.append(el('text', { x: x0 + 3, y: by + barH - 3, class: 'tl-crash-text' }, 'crashed holder: key without TTL'));
      svg.append(g);
      continue;
    }
    g.append(titled(el('rect', { x: x0, y: by, width: Math.max(2, solidTo - x0), height: barH, class: 'tl-bar' }),
      `i${h.inst} holds item ${h.item}'s ${lockWords(h.lock)}, token ${h.token}${h.untold ? ' (killed before it told its acquisition: from Redis)' : ''}`));
    if (h.stop > h.leaseEnd) {
      g.append(titled(el('rect', { x: solidTo, y: by, width: Math.max(1, x1 - solidTo), height: barH, fill: `url(#hatch${c})`, class: 'tl-past' }),
        'still working, lock gone'));
      if (x1 - solidTo > 260) g.append(el('text', { x: (solidTo + x1) / 2, y: by + barH + 15, class: 'tl-note tl-middle' }, 'still working, lock gone'));
    }
    if (h.leaseEnd <= m.T && h.leaseEnd < h.stop) {
      g.append(titled(el('line', { x1: solidTo, x2: solidTo, y1: by - 5, y2: by + barH + 5, class: 'tl-lease-end' }), `token ${h.token}: lease ends`));
      if (x1 - solidTo > 56) g.append(el('text', { x: solidTo + 3, y: by - 3, class: 'tl-note' }, 'lease ends'));
    }
    for (const t of h.renewals) g.append(titled(el('line', { x1: x(t), x2: x(t), y1: by - 4, y2: by + 2, class: 'tl-renew' }), 'renewed'));
    if (h.lostAt !== null) {
      const lx = x(h.lostAt);
      g.append(titled(el('path', { d: `M${lx - 4} ${by - 1} l8 8 m0 -8 l-8 8`, class: 'tl-lost' }), `token ${h.token}: the holder learned of the loss`));
      g.append(el('text', { x: lx - 8, y: by + barH + 15, class: 'tl-lost-text' }, 'lost'));
    }
    if (h.lock === 'del-release' && h.end !== null && h.end > h.leaseEnd) {
      g.append(titled(el('text', { x: x1 + 3, y: by + barH - 3, class: 'tl-lost-text' }, 'DEL'), `token ${h.token}'s release: a plain DEL, whoever's key it was`));
    }
    const label = solidTo - x0 > 62 ? `token ${h.token}` : String(h.token);
    g.append(el('text', { x: x0 + 3, y: by + barH - 3, class: 'tl-token' }, label));
    for (const w of h.writes) {
      const wx = x(w.t); const late = w.ok && w.t > h.leaseEnd;
      const cls = w.ok ? (late ? 'tl-write late' : 'tl-write ok') : 'tl-write refused';
      const words = w.ok ? (late ? 'accepted late' : 'accepted') : 'refused';
      const mark = el('g', { class: cls, 'data-write': words });
      mark.append(titled(el('rect', { x: wx - 4, y: by + 3, width: 8, height: 8, transform: `rotate(45 ${wx} ${by + 7})` }), `write ${words}, token ${w.token}`));
      const onLeft = w.t > h.leaseEnd; // over the hatched part, clear of the next holder's words
      mark.append(el('text', { x: onLeft ? wx - 6 : wx + 6, y: by - 3, class: `tl-write-text${onLeft ? ' tl-end' : ''}` }, words));
      g.append(mark);
    }
    svg.append(g);
  }
  for (const s of m.stalls) {
    const r = rows.find((q) => q.inst === s.inst && q.item === s.item && q.lock === (s.hold ? s.hold.lock : ''));
    const sy = r.y + (s.hold ? s.hold.lane : 0) * laneH + barY + barH + 2;
    svg.append(titled(el('rect', { x: x(s.from), y: sy, width: Math.max(2, x(s.to) - x(s.from)), height: 5, class: 'tl-stall' }), `i${s.inst} stalled`));
    svg.append(el('text', { x: x(s.from) + 3, y: sy + 13, class: 'tl-note' }, 'stall'));
  }
  const lined = new Set(); // one process killed holding two items: one line on each of its rows
  for (const k of m.kills) {
    for (const r of rows.filter((q) => q.inst === k.inst && !lined.has(`${k.inst}|${k.at}`))) {
      svg.append(titled(el('line', { x1: x(k.at), x2: x(k.at), y1: r.y, y2: r.y + r.lanes * laneH, class: 'tl-kill' }), `i${k.inst} killed (kill -9)`));
    }
    lined.add(`${k.inst}|${k.at}`);
    if (!k.hold) continue;
    const h = k.hold;
    const r = rows.find((q) => q.inst === h.inst && q.item === h.item && q.lock === h.lock);
    const by = r.y + h.lane * laneH + barY;
    svg.append(el('text', { x: x(k.at) + 3, y: by - 3, class: 'tl-kill-text' }, 'kill -9'));
    if (h.leaseEnd > k.at) {
      const lw = Math.max(1, x(Math.min(h.leaseEnd, m.T)) - x(k.at));
      svg.append(titled(el('rect', { x: x(k.at), y: by, width: lw, height: barH, class: `tl-dead-lease i${h.inst % 6}` }),
        `token ${h.token}'s lease, still in Redis: its holder is dead`));
      if (lw > 150) svg.append(el('text', { x: x(k.at) + 50, y: by + barH - 3, class: 'tl-note' }, 'lease of a dead holder'));
    }
    const gapTo = k.sale ? k.sale.t : m.T;
    const gap = el('g', { class: 'tl-gap', 'data-gap-ms': Math.round(gapTo - k.at), 'data-item': k.item, 'data-takeover': String(k.takeover) });
    gap.append(titled(el('rect', { x: x(k.at), y: by + barH + 3, width: Math.max(2, x(gapTo) - x(k.at)), height: 6 }),
      `no sale of item ${k.item} for ${secs(gapTo - k.at)}`));
    gap.append(el('text', { x: x(k.at) + 3, y: by + barH + 20, class: 'tl-gap-text' }, `gap ${secs(gapTo - k.at)}${k.sale ? '' : '…'}`));
    svg.append(gap);
    if (k.next) {
      const nr = rows.find((q) => q.inst === k.next.inst && q.item === k.next.item && q.lock === k.next.lock);
      const ny = nr.y + k.next.lane * laneH + barY;
      // Left of the next bar, on its line: above it are its writes' words.
      svg.append(el('text', { x: x(k.next.start) - 4, y: ny + barH - 3, class: 'tl-note tl-end' }, k.takeover ? 'took over' : 'after the lease'));
    }
  }
  for (const o of m.overlaps) {
    const what = o.kind === 'past' ? `i${o.a.inst} still working, i${o.b.inst} holding item ${o.a.item}` : `i${o.a.inst} and i${o.b.inst} both holding item ${o.a.item}`;
    for (const h of [o.a, o.b]) {
      const r = rows.find((q) => q.inst === h.inst && q.item === h.item && q.lock === h.lock);
      svg.append(titled(el('rect', { x: x(o.from), y: r.y + h.lane * laneH + barY - 3, width: Math.max(2, x(o.to) - x(o.from)), height: barH + 6, class: 'tl-overlap' }),
        `${what}, for ${secs(o.to - o.from)}`));
    }
  }
  svg.append(el('line', { x1: x(m.T), x2: x(m.T), y1: 0, y2: height, class: 'tl-cursor' }));
  box.replaceChildren(svg);
  labels.style.paddingTop = `${axisH}px`;
  labels.innerHTML = labelRows.join('');
  const said = sentences(m);
  if (!said.length) said.push({ kind: 'none', text: m.holds.length ? 'No two holders of one lock overlapped, and no write was refused.' : 'No lock was taken in this window.' });
  const text = said.map((s) => s.text).join('\n');
  if (summary.dataset.text !== text) { // the words change only when what they say does (they are a live region)
    summary.dataset.text = text;
    summary.replaceChildren(...said.map((s) => {
      const li = document.createElement('li');
      li.className = `tl-said ${s.kind}`; li.dataset.kind = s.kind; li.textContent = s.text;
      return li;
    }));
  }
  return { x, width };
}
