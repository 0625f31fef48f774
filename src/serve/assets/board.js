// The live board of `nightshift serve` (docs/serve.md). Every text is put
// in the page with textContent, never as markup; links only to http(s).
'use strict';
(function () {
  const $ = (id) => document.getElementById(id);
  const body = document.body;
  let last = null;      // the last event number rendered
  let gaps = 0;         // events missing between two rendered ones
  let seen = 0;         // events rendered
  let state = null;     // the last state
  let skew = 0;         // server clock minus this one, ms
  let es = null;
  let downSince = null; // Date the stream went down
  let ledgerDown = null;
  let retry = null;
  let shown = null;     // the item whose output is shown

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function link(href, text) {
    if (typeof href !== 'string' || !/^https?:\/\//.test(href)) return el('span', null, text);
    const a = el('a', null, text);
    a.href = href;
    a.rel = 'noopener noreferrer';
    return a;
  }
  function hhmm(d) {
    return d.toLocaleTimeString([], { hour: '2-digit', minute: '2-digit', hour12: false });
  }
  function span(ms) {
    const s = Math.max(0, Math.round(ms / 1000));
    if (s < 60) return s + 's';
    if (s < 3600) return Math.floor(s / 60) + 'm' + String(s % 60).padStart(2, '0') + 's';
    return Math.floor(s / 3600) + 'h' + String(Math.floor((s % 3600) / 60)).padStart(2, '0') + 'm';
  }
  function now() { return Date.now() + skew; }
  function itemName(index, title) {
    return (index !== null && index !== undefined ? index + ' ' : '') + (title || '');
  }
  function replace(node, children) {
    node.replaceChildren(...children);
  }

  function renderConn() {
    const c = $('conn');
    if (downSince) {
      c.textContent = 'disconnected since ' + hhmm(downSince) + ', retrying';
      c.className = 'conn down';
    } else if (ledgerDown) {
      c.textContent = 'the ledger does not answer since ' + hhmm(ledgerDown) + ', retrying';
      c.className = 'conn down';
    } else {
      c.textContent = 'live' + (last !== null ? ' · event ' + last : '');
      c.className = 'conn';
    }
    body.dataset.lastSeq = last === null ? '' : String(last);
    body.dataset.gaps = String(gaps);
    body.dataset.seen = String(seen);
    body.dataset.conn = downSince ? 'down' : 'up';
    const where = downSince ? 'disconnected' : 'live';
    const lanes = state && state.board ? state.board.lanes.length : 0;
    document.title = 'nightshift · ' + where + ' · #' + (last === null ? '-' : last) +
      (gaps ? ' · ' + gaps + ' missed' : '') + ' · seen ' + seen + ' · ' + lanes + ' workers';
  }

  function renderLanes(b) {
    const lanes = b ? b.lanes : [];
    if (!lanes.length) {
      replace($('lanes'), [el('p', 'none', b ? 'no worker is running' : 'no run yet')]);
      return;
    }
    replace($('lanes'), lanes.map((l) => {
      const d = el('div', 'lane');
      d.dataset.worker = l.worker;
      d.dataset.host = l.host;
      d.dataset.pid = String(l.pid);
      if (l.item_key) d.dataset.key = l.item_key;
      d.append(el('div', 'who', l.host + ' · pid ' + l.pid + ' · ' + l.worker));
      d.append(el('div', 'item', l.item_key ? itemName(l.item_index, l.title) : 'idle'));
      const p = el('div', 'line');
      p.append(el('span', 'phase', l.phase));
      if (l.round) p.append(' round ' + l.round);
      if (l.since) {
        const t = el('span', 'elapsed');
        t.dataset.since = l.since;
        p.append(' · ', t);
      }
      d.append(p);
      return d;
    }));
  }

  function renderList(id, rows, make) {
    replace($(id), rows.length ? rows.map(make) : [el('li', 'none', 'none')]);
  }

  function renderFinished(b) {
    const rows = b ? b.finished : [];
    replace($('finished').tBodies[0], rows.map((f) => {
      const tr = el('tr');
      tr.dataset.key = f.key;
      tr.append(el('td', null, f.index));
      const t = el('td', null, f.title);
      if (f.reason) t.title = f.reason;
      tr.append(t);
      tr.append(el('td', 'outcome ' + (f.failed ? 'failed' : 'good'), f.outcome));
      const pr = el('td');
      if (f.pr_number) pr.append(link(f.pr_url, '#' + f.pr_number));
      tr.append(pr);
      tr.append(el('td', null, f.branch || ''));
      tr.append(el('td', null, f.ci || ''));
      const took = f.ended_at ? Date.parse(f.ended_at) - Date.parse(f.started_at) : 0;
      tr.append(el('td', null, span(took)));
      return tr;
    }));
  }

  function renderClock() {
    const b = state && state.board;
    const parts = [];
    if (b && b.deadline) {
      const left = Date.parse(b.deadline) - now();
      parts.push(left > 0 ? 'deadline in ' + span(left) + ' (' + hhmm(new Date(b.deadline)) + ')'
        : 'deadline passed (' + hhmm(new Date(b.deadline)) + ')');
    }
    if (b && b.sleeping_until) {
      const left = Date.parse(b.sleeping_until) - now();
      const why = b.sleeping_kind === 'quota_reserve' ? "'s quota reserve, the window resets in " : "'s usage limit, resets in ";
      parts.push('sleeping at ' + (b.sleeping_agent || 'an agent') + why + span(left));
    }
    if (b && b.status === 'running' && b.counts) parts.push(b.counts.queued + ' item(s) can still start');
    $('clock').textContent = parts.join(' · ');
    for (const t of document.querySelectorAll('.elapsed')) {
      t.textContent = span(now() - Date.parse(t.dataset.since));
    }
  }

  function applyState(s) {
    state = s;
    if (s.now) skew = Date.parse(s.now) - Date.now();
    $('repo').textContent = s.repo || '';
    const b = s.board;
    $('headline').textContent = b ? (b.status + ' · ' + b.headline) : (s.text || '');
    renderLanes(b);
    renderList('needs', b ? b.needs_you : [], (n) => {
      const li = el('li');
      li.dataset.key = n.key;
      li.append(el('span', 'kind', n.kind), ' ', el('span', 'title', n.title), ': ');
      li.append(n.url ? link(n.url, n.text) : el('span', null, n.text));
      return li;
    });
    renderList('queue', b ? b.queue : [], (q) => {
      const li = el('li', null, q.title);
      li.dataset.key = q.key;
      return li;
    });
    const quota = b ? b.quota : [];
    $('quota-section').hidden = !quota.length;
    // One line per account and window: its use, first reading → last (docs/limits.md#gauges).
    renderList('quota', quota, (q) => {
      const pct = (p) => Math.round(p[1]) + '%';
      const first = q.points[0], last = q.points[q.points.length - 1];
      return el('li', null, q.account + ' ' + q.window + ' ' + pct(first) + ' → ' + pct(last));
    });
    renderFinished(b);
    renderClock();
    renderConn();
  }

  function onEvent(e) {
    if (last !== null && e.seq !== last + 1) gaps += e.seq > last ? e.seq - last - 1 : 0;
    if (last !== null && e.seq <= last) return;
    last = e.seq;
    seen += 1;
    const li = el('li', null, '#' + e.seq + ' ' + hhmm(new Date(e.at)) + ' ' + e.kind +
      (e.data && e.data.key ? ' ' + String(e.data.key).slice(0, 8) : '') +
      (e.data && e.data.phase ? ' ' + e.data.phase : '') +
      (e.data && e.data.outcome ? ' ' + e.data.outcome : ''));
    li.dataset.seq = String(e.seq);
    const log = $('log');
    log.prepend(li);
    while (log.children.length > 200) log.lastChild.remove();
    renderConn();
  }

  async function loadState() {
    const r = await fetch('/api/state', { cache: 'no-store', credentials: 'same-origin' });
    if (!r.ok) throw new Error('state: ' + r.status);
    const s = await r.json();
    applyState(s);
    return s;
  }

  function down() {
    if (es) { es.close(); es = null; }
    if (!downSince) downSince = new Date();
    renderConn();
    if (!retry) retry = setTimeout(reconnect, 2000);
  }

  async function reconnect() {
    retry = null;
    try {
      const s = await loadState();
      // A ledger numbers from where it is: one that is behind this page
      // was replaced; start again from its last event.
      if (last === null || s.last_seq < last) last = s.last_seq;
      connect();
    } catch (err) {
      down();
    }
  }

  function connect() {
    es = new EventSource('/events?after=' + last);
    es.onopen = () => { downSince = null; renderConn(); };
    es.onmessage = (m) => onEvent(JSON.parse(m.data));
    es.addEventListener('state', (m) => applyState(JSON.parse(m.data)));
    es.addEventListener('ledger', (m) => {
      const l = JSON.parse(m.data);
      ledgerDown = l.up ? null : new Date(l.since);
      renderConn();
    });
    es.onerror = down;
  }

  async function showOutput(key) {
    shown = key;
    $('output-for').textContent = 'item ' + key.slice(0, 8) + ' — the end of its recorded output and of the call running now (masked)';
    const r = await fetch('/api/item?key=' + encodeURIComponent(key), { cache: 'no-store' });
    if (!r.ok || shown !== key) return;
    const o = await r.json();
    replace($('output'), o.output.length ? o.output.map((p) => {
      const d = el('div');
      d.append(el('p', null, p.what + (p.exit_code === null ? '' : ' · exit ' + p.exit_code)));
      d.append(el('pre', null, String(p.tail).split('\n').slice(-40).join('\n')));
      return d;
    }) : [el('p', 'none', 'nothing recorded yet')]);
  }

  document.addEventListener('click', (ev) => {
    const t = ev.target.closest('[data-key]');
    if (t && !ev.target.closest('a')) showOutput(t.dataset.key);
  });
  setInterval(renderClock, 1000);
  // The running call's output changes without an event: read it again.
  setInterval(() => { if (shown && !downSince) showOutput(shown).catch(() => {}); }, 3000);
  setInterval(() => { if (!downSince) loadState().catch(() => {}); }, 30000);
  reconnect();
})();
