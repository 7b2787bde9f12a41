// The delayq dashboard (docs/dashboard.md). Plain JavaScript, no dependencies. Everything it shows
// comes from the /v1 API and /metrics, with the bearer token the user gives when the server asks
// (kept in sessionStorage). Data only ever reaches the DOM as text (textContent, attribute values),
// never as markup.
'use strict';

(() => {
  const TOKEN_KEY = 'delayq.token';
  const POLL_MS = 2000;
  const SCHEDULE_POLL_MS = 5000;
  const STATES = ['delayed', 'ready', 'reserved', 'dead'];
  const PAGE_SIZE = 50;
  const MINUTE = 60000;
  const HOUR = 3600000;
  const RANGES = {
    hour: { label: 'Next hour', span: HOUR, step: MINUTE },
    day: { label: 'Next day', span: 24 * HOUR, step: HOUR },
    week: { label: 'Next week', span: 7 * 24 * HOUR, step: HOUR },
  };
  // The server's root: the page is served at <root>/ui/.
  const ROOT = new URL('../', location.href);

  const $ = (id) => document.getElementById(id);

  // ---- DOM helpers: every value goes in as text or as an attribute value ----

  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    setAttrs(el, attrs);
    append(el, children);
    return el;
  }

  function s(tag, attrs, ...children) {
    const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
    setAttrs(el, attrs);
    append(el, children);
    return el;
  }

  function setAttrs(el, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'class') el.setAttribute('class', v);
      else if (k === 'text') el.textContent = String(v);
      else if (k === 'dataset') Object.assign(el.dataset, v);
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? '' : String(v));
    }
  }

  function append(el, children) {
    for (const c of children.flat()) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
  }

  // ---- formatting ----

  const pad = (n) => String(n).padStart(2, '0');

  function fmtTime(ms) {
    if (ms === null || ms === undefined) return '–';
    const d = new Date(ms);
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ` +
      `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  }

  function fmtDuration(ms) {
    const a = Math.abs(ms);
    if (a < 1000) return `${Math.round(a)} ms`;
    if (a < 60000) return `${(a / 1000).toFixed(a < 10000 ? 1 : 0)} s`;
    if (a < HOUR) return `${Math.round(a / 60000)} min`;
    if (a < 48 * HOUR) return `${(a / HOUR).toFixed(1)} h`;
    return `${(a / (24 * HOUR)).toFixed(1)} days`;
  }

  function fmtRelative(ms) {
    if (ms === null || ms === undefined) return '';
    const d = ms - Date.now();
    if (Math.abs(d) < 1000) return 'now';
    return d > 0 ? `in ${fmtDuration(d)}` : `${fmtDuration(d)} ago`;
  }

  function fmtSeconds(sec) {
    if (sec === null || sec === undefined || !Number.isFinite(sec)) return '–';
    if (sec < 1) return `${(sec * 1000).toFixed(sec < 0.01 ? 2 : 0)} ms`;
    return `${sec.toFixed(sec < 10 ? 2 : 0)} s`;
  }

  function fmtRate(r) {
    if (r === null || r === undefined) return '–';
    return r >= 100 ? `${Math.round(r)}/s` : `${r.toFixed(1)}/s`;
  }

  // A datetime-local input's value (local time, minutes) for `ms`, and back.
  function toLocalInput(ms) {
    const d = new Date(ms);
    return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T` +
      `${pad(d.getHours())}:${pad(d.getMinutes())}`;
  }

  // ---- the API ----

  class ApiError extends Error {
    constructor(status, code, message, field) {
      super(message);
      this.status = status;
      this.code = code;
      this.field = field || null;
    }
  }

  let onUnauthorized = () => {};

  // One call: `path` relative to the server's root; JSON in, JSON (or text) out. A 401 clears the
  // token and shows the sign-in form.
  async function api(method, path, body) {
    const headers = {};
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = `Bearer ${token}`;
    const init = { method, headers, cache: 'no-store' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    let resp;
    try {
      resp = await fetch(new URL(path, ROOT), init);
    } catch (e) {
      throw new ApiError(0, 'network', `cannot reach the server (${e.message})`);
    }
    const text = await resp.text();
    let json = null;
    if (text && (resp.headers.get('content-type') || '').includes('json')) {
      try { json = JSON.parse(text); } catch (_) { json = null; }
    }
    if (resp.status === 401) {
      onUnauthorized(token !== null);
      throw new ApiError(401, 'unauthorized', 'missing or invalid bearer token');
    }
    if (!resp.ok) {
      const e = json && json.error;
      if (e && e.message) throw new ApiError(resp.status, e.code, e.message, e.field);
      throw new ApiError(resp.status, null, `${method} /${path.split('?')[0]}: ${resp.status} ${resp.statusText || 'error'}`);
    }
    return json !== null ? json : text;
  }

  const enc = encodeURIComponent;

  // Topics with their counts.
  function fetchTopics() {
    return api('GET', 'v1/topics');
  }

  // ---- /metrics: rates and lateness quantiles from two successive scrapes ----

  // The fetch asks for no OpenMetrics, so /metrics answers in the Prometheus text format 0.0.4;
  // the sample lines read here are the same in both formats.
  function parseMetrics(text) {
    const m = { at: performance.now(), pushed: 0, delivered: 0, buckets: new Map() };
    for (const line of text.split('\n')) {
      if (!line || line.startsWith('#')) continue;
      const r = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
      if (!r) continue;
      const v = Number(r[3]);
      if (!Number.isFinite(v)) continue;
      if (r[1] === 'delayq_jobs_pushed_total') m.pushed += v;
      else if (r[1] === 'delayq_jobs_delivered_total') m.delivered += v;
      else if (r[1] === 'delayq_delivery_lateness_seconds_bucket') {
        const le = /le="([^"]*)"/.exec(r[2] || '');
        if (le) {
          const bound = le[1] === '+Inf' ? Infinity : Number(le[1]);
          m.buckets.set(bound, (m.buckets.get(bound) || 0) + v);
        }
      }
    }
    return m;
  }

  // As Prometheus's histogram_quantile over the increase between two scrapes (linear within a
  // bucket; the highest finite bound when the quantile falls in +Inf). Null without deliveries.
  function quantile(q, before, after) {
    const bounds = [...after.buckets.keys()].sort((a, b) => a - b);
    const cum = bounds.map((b) => after.buckets.get(b) - (before.buckets.get(b) || 0));
    const total = cum.length ? cum[cum.length - 1] : 0;
    if (!(total > 0)) return null;
    const rank = q * total;
    for (let i = 0; i < bounds.length; i++) {
      if (cum[i] >= rank) {
        if (bounds[i] === Infinity) return i > 0 ? bounds[i - 1] : null;
        const lo = i > 0 ? bounds[i - 1] : 0;
        const below = i > 0 ? cum[i - 1] : 0;
        const inBucket = cum[i] - below;
        return inBucket > 0 ? lo + (bounds[i] - lo) * ((rank - below) / inBucket) : bounds[i];
      }
    }
    return null;
  }

  function rates(before, after) {
    if (!before) return null;
    const dt = (after.at - before.at) / 1000;
    if (dt <= 0) return null;
    return {
      pushed: Math.max(0, after.pushed - before.pushed) / dt,
      delivered: Math.max(0, after.delivered - before.delivered) / dt,
      p50: quantile(0.5, before, after),
      p99: quantile(0.99, before, after),
    };
  }

  // ---- page chrome: errors, notices, confirmation, sign-in ----

  function showError(e) {
    const box = $('error');
    if (!e) { box.hidden = true; box.textContent = ''; return; }
    let text = e.message || String(e);
    if (e.code && e.status) text += ` (${e.status} ${e.code}${e.field ? `, field ${e.field}` : ''})`;
    box.textContent = text;
    box.hidden = false;
  }

  let noticeTimer = null;
  function notice(text) {
    const box = $('notice');
    box.textContent = text;
    box.hidden = false;
    clearTimeout(noticeTimer);
    noticeTimer = setTimeout(() => { box.hidden = true; }, 4000);
  }

  // A modal confirmation: resolves true when confirmed.
  function confirmAction(text, okLabel) {
    const dialog = $('confirm');
    $('confirm-text').textContent = text;
    $('confirm-ok').textContent = okLabel || 'Confirm';
    return new Promise((resolve) => {
      const done = (ok) => {
        $('confirm-ok').removeEventListener('click', yes);
        $('confirm-cancel').removeEventListener('click', no);
        dialog.removeEventListener('cancel', no);
        if (dialog.open) dialog.close();
        resolve(ok);
      };
      const yes = () => done(true);
      const no = () => done(false);
      $('confirm-ok').addEventListener('click', yes);
      $('confirm-cancel').addEventListener('click', no);
      dialog.addEventListener('cancel', no);
      dialog.showModal();
      $('confirm-cancel').focus();
    });
  }

  // Runs an action with its confirmation; shows its error or a notice. Resolves to its result, or
  // undefined when cancelled or refused.
  async function act(question, okLabel, run, done) {
    if (!(await confirmAction(question, okLabel))) return undefined;
    try {
      const r = await run();
      showError(null);
      if (done) notice(typeof done === 'function' ? done(r) : done);
      return r;
    } catch (e) {
      showError(e);
      return undefined;
    }
  }

  let view = null; // the current view's { stop() }
  let generation = 0;

  function stopView() {
    if (view && view.stop) view.stop();
    view = null;
    generation++;
  }

  function showLogin(refused) {
    stopView();
    $('main').replaceChildren();
    $('nav').hidden = true;
    showError(null);
    $('login').hidden = false;
    const err = $('login-error');
    err.hidden = !refused;
    err.textContent = refused ? 'That token was refused.' : '';
    $('token').value = '';
    $('token').focus();
  }

  onUnauthorized = (hadToken) => {
    sessionStorage.removeItem(TOKEN_KEY);
    showLogin(hadToken);
  };

  function signedIn() {
    $('login').hidden = true;
    $('nav').hidden = false;
    $('sign-out').hidden = sessionStorage.getItem(TOKEN_KEY) === null;
  }

  // ---- views ----

  // A view renders into `main` and returns { stop() }. `alive()` is false once the user moved on,
  // so late answers are dropped.
  function mount(render) {
    stopView();
    const mine = generation;
    const main = $('main');
    main.replaceChildren();
    view = render(main, () => mine === generation) || {};
  }

  // Polls `tick` now and every `ms` (after each answer) until the view stops.
  function poll(alive, ms, tick) {
    let timer = null;
    let stopped = false;
    const run = async () => {
      if (stopped || !alive()) return;
      await tick();
      if (!stopped && alive() && $('login').hidden) timer = setTimeout(run, ms);
    };
    run();
    return { stop() { stopped = true; clearTimeout(timer); } };
  }

  function stateLink(topic, state, count, callback) {
    const href = `#/topics/${enc(topic)}/${state}${callback ? '?callback=1' : ''}`;
    return h('a', { href, class: count > 0 ? `count ${state}` : 'count zero', text: count });
  }

  // Overview: every topic's counts, rates and lateness, next due time; polled.
  function overview(main, alive) {
    const cards = {
      pushed: h('strong', { id: 'rate-pushed', text: '–' }),
      delivered: h('strong', { id: 'rate-delivered', text: '–' }),
      p50: h('strong', { id: 'lateness-p50', text: '–' }),
      p99: h('strong', { id: 'lateness-p99', text: '–' }),
      next: h('strong', { id: 'next-due', text: '–' }),
    };
    const nextAbs = h('small', {});
    const card = (label, value, extra) => h('div', { class: 'stat' }, h('span', { text: label }), value, extra);
    const body = h('tbody', { id: 'topics' });
    const updated = h('p', { class: 'muted', id: 'updated' });
    main.append(
      h('h1', { text: 'Overview' }),
      h('div', { class: 'stats' },
        card('Pushes', cards.pushed),
        card('Deliveries', cards.delivered),
        card('Lateness p50', cards.p50, h('small', { text: 'of deliveries, last 2 s' })),
        card('Lateness p99', cards.p99, h('small', { text: 'of deliveries, last 2 s' })),
        card('Next due', cards.next, nextAbs)),
      h('div', { class: 'scroll' },
        h('table', { class: 'topics' },
          h('thead', {},
            h('tr', {},
              h('th', { rowspan: 2, text: 'Topic' }),
              h('th', { colspan: 4, class: 'group', text: 'Pull jobs' }),
              h('th', { colspan: 4, class: 'group', text: 'Callback jobs' }),
              h('th', { rowspan: 2, text: '' })),
            h('tr', {}, [...STATES, ...STATES].map((st, i) => h('th', { class: i % 4 === 0 ? 'group' : null, text: st })))),
          body)),
      updated);
    let last = null;
    const tick = async () => {
      try {
        const [topics, stats, metricsText] = await Promise.all([
          fetchTopics(),
          api('GET', 'v1/stats'),
          api('GET', 'metrics').catch((e) => (e.status === 401 ? Promise.reject(e) : null)),
        ]);
        if (!alive()) return;
        showError(null);
        const settings = stats.settings || {};
        const rows = (topics.topics || []).map((t) => {
          const cb = t.callbacks || {};
          const paused = Boolean(settings[t.topic] && settings[t.topic].paused);
          return h('tr', { dataset: { topic: t.topic } },
            h('th', { scope: 'row' }, h('a', { href: `#/topics/${enc(t.topic)}/delayed`, text: t.topic }),
              paused ? h('span', { class: 'badge paused', text: 'paused' }) : null),
            STATES.map((st, i) => h('td', { class: i === 0 ? 'group' : null, dataset: { state: st } }, stateLink(t.topic, st, t[st] || 0, false))),
            STATES.map((st, i) => h('td', { class: i === 0 ? 'group' : null, dataset: { callbackState: st } }, stateLink(t.topic, st, cb[st] || 0, true))),
            h('td', {}, h('a', { href: `#/schedule/${enc(t.topic)}`, text: 'schedule' }), ' ',
              pauseButton(t.topic, paused, tick)));
        });
        if (rows.length === 0) {
          rows.push(h('tr', {}, h('td', { colspan: 10, class: 'muted', text: 'No jobs in any topic.' })));
        }
        body.replaceChildren(...rows);
        const due = topics.next_due_ms;
        cards.next.textContent = due === null || due === undefined ? 'nothing pending' : fmtRelative(due);
        nextAbs.textContent = due === null || due === undefined ? '' : fmtTime(due);
        if (typeof metricsText === 'string') {
          const now = parseMetrics(metricsText);
          const r = rates(last, now);
          last = now;
          if (r) {
            cards.pushed.textContent = fmtRate(r.pushed);
            cards.delivered.textContent = fmtRate(r.delivered);
            cards.p50.textContent = r.p50 === null ? 'none' : fmtSeconds(r.p50);
            cards.p99.textContent = r.p99 === null ? 'none' : fmtSeconds(r.p99);
          }
        }
        updated.textContent = `Updated ${fmtTime(Date.now())}; refreshed every ${POLL_MS / 1000} s.`;
      } catch (e) {
        if (alive() && e.status !== 401) showError(e);
      }
    };
    return poll(alive, POLL_MS, tick);
  }

  // "What fires next": due jobs per minute (next hour) or per hour (next day, week), for one topic
  // or all.
  function schedule(main, alive, topic, range) {
    const r = RANGES[range] || RANGES.hour;
    const select = h('select', { id: 'schedule-topic', 'aria-label': 'Topic' },
      h('option', { value: '', text: 'All topics' }));
    if (topic) select.append(h('option', { value: topic, text: topic, selected: true }));
    select.addEventListener('change', () => { location.hash = scheduleHash(select.value, range); });
    const ranges = h('div', { class: 'segmented', role: 'group', 'aria-label': 'Range' },
      Object.entries(RANGES).map(([key, v]) => h('a', {
        href: scheduleHash(topic, key), class: key === (RANGES[range] ? range : 'hour') ? 'on' : '',
        dataset: { range: key }, text: v.label,
      })));
    const total = h('p', { id: 'schedule-total', class: 'muted' });
    const chart = h('div', { id: 'chart', class: 'chart' });
    main.append(h('h1', { text: 'What fires next' }),
      h('div', { class: 'toolbar' }, select, ranges), total, chart);
    fetchTopics().then((t) => {
      if (!alive()) return;
      for (const x of t.topics || []) {
        if (x.topic !== topic) select.append(h('option', { value: x.topic, text: x.topic }));
      }
    }, () => {});
    const tick = async () => {
      const from = Math.floor(Date.now() / MINUTE) * MINUTE;
      const to = from + r.span;
      const q = `from=${from}&to=${to}&step=${r.step}`;
      const path = topic ? `v1/topics/${enc(topic)}/schedule?${q}` : `v1/schedule?${q}`;
      try {
        const res = await api('GET', path);
        if (!alive()) return;
        showError(null);
        const sum = res.counts.reduce((a, b) => a + b, 0);
        const ticks = res.ticks || res.counts.map(() => 0);
        const tsum = ticks.reduce((a, b) => a + b, 0);
        total.textContent = `${sum} job${sum === 1 ? '' : 's'} due ${r.label.toLowerCase()}` +
          `${topic ? ` in ${topic}` : ''}, per ${r.step === MINUTE ? 'minute' : 'hour'}` +
          (tsum > 0 || res.ticks_partial ? `, and ${tsum} recurring schedule tick${tsum === 1 ? '' : 's'}` +
            `${res.ticks_partial ? ' (not every schedule counted: too many)' : ''}` : '') + '.';
        chart.replaceChildren(barChart(res.from, res.step, res.counts, ticks, r.step === MINUTE));
      } catch (e) {
        if (alive() && e.status !== 401) showError(e);
      }
    };
    return poll(alive, SCHEDULE_POLL_MS, tick);
  }

  function scheduleHash(topic, range) {
    return `#/schedule${topic ? `/${enc(topic)}` : ''}${range && range !== 'hour' ? `?range=${range}` : ''}`;
  }

  // A bar per step, with a y axis (counts) and an x axis (local times).
  // Jobs due per step, each bar topped by the coming ticks of recurring schedules in its step
  // (their jobs do not exist yet), in a colour of their own.
  function barChart(from, step, counts, ticks, byMinute) {
    const W = 960, H = 280, L = 48, R = 12, T = 12, B = 40;
    const pw = W - L - R, ph = H - T - B;
    const max = Math.max(1, ...counts.map((c, i) => c + (ticks[i] || 0)));
    const top = niceCeil(max);
    const bw = pw / counts.length;
    const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': 'Jobs falling due per step', class: 'bars' });
    // y axis: 0, half (when a whole number), top.
    for (const v of Number.isInteger(top / 2) ? [0, top / 2, top] : [0, top]) {
      const y = T + ph - (v / top) * ph;
      svg.append(s('line', { x1: L, x2: W - R, y1: y, y2: y, class: 'grid' }),
        s('text', { x: L - 6, y: y + 4, 'text-anchor': 'end', class: 'axis', text: v }));
    }
    counts.forEach((c, i) => {
      const start = from + i * step;
      const bh = (c / top) * ph;
      const bar = s('rect', {
        x: L + i * bw + (bw > 4 ? 1 : 0), y: T + ph - bh, width: Math.max(1, bw - (bw > 4 ? 2 : 0)), height: bh,
        class: c > 0 ? 'bar' : 'bar empty', dataset: { start, count: c },
      }, s('title', { text: `${fmtTime(start)}: ${c} job${c === 1 ? '' : 's'}` }));
      svg.append(bar);
      const k = ticks[i] || 0;
      if (k > 0) {
        const th = (k / top) * ph;
        svg.append(s('rect', {
          x: L + i * bw + (bw > 4 ? 1 : 0), y: T + ph - bh - th, width: Math.max(1, bw - (bw > 4 ? 2 : 0)), height: th,
          class: 'tick-bar', dataset: { start, ticks: k },
        }, s('title', { text: `${fmtTime(start)}: ${k} recurring schedule tick${k === 1 ? '' : 's'}` })));
      }
    });
    if (ticks.some((k) => k > 0)) {
      svg.append(s('rect', { x: W - R - 250, y: T, width: 10, height: 10, class: 'key-jobs' }),
        s('text', { x: W - R - 236, y: T + 9, class: 'axis', text: 'jobs' }),
        s('rect', { x: W - R - 190, y: T, width: 10, height: 10, class: 'key-ticks' }),
        s('text', { x: W - R - 176, y: T + 9, class: 'axis', text: 'schedule ticks' }));
    }
    // x axis labels: every 10 minutes (hour), 3 hours (day), or midnight (week).
    const span = counts.length * step;
    counts.forEach((_, i) => {
      const t = from + i * step;
      const d = new Date(t);
      let label = null;
      if (byMinute) {
        if (d.getMinutes() % 10 === 0) label = `${pad(d.getHours())}:${pad(d.getMinutes())}`;
      } else if (span <= 24 * HOUR) {
        if (d.getHours() % 3 === 0) label = `${pad(d.getHours())}:00`;
      } else if (d.getHours() === 0) {
        label = `${d.toLocaleDateString(undefined, { weekday: 'short' })} ${d.getDate()}`;
      }
      if (label !== null) {
        const x = L + i * bw;
        svg.append(s('line', { x1: x, x2: x, y1: T + ph, y2: T + ph + 5, class: 'tick' }),
          s('text', { x, y: T + ph + 20, 'text-anchor': 'middle', class: 'axis', text: label }));
      }
    });
    svg.append(s('line', { x1: L, x2: W - R, y1: T + ph, y2: T + ph, class: 'base' }));
    return svg;
  }

  function niceCeil(v) {
    const p = 10 ** Math.floor(Math.log10(v));
    for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
    return 10 * p;
  }

  // A topic's jobs in one state, a page at a time (cursor paging).
  function jobList(main, alive, topic, state, callback) {
    const cursors = [null]; // cursors[i] is page i's; the last is the page shown
    const tbody = h('tbody', { id: 'jobs' });
    const prev = h('button', { id: 'prev', type: 'button', text: '← Previous', disabled: true });
    const next = h('button', { id: 'next', type: 'button', text: 'Next →', disabled: true });
    const pageInfo = h('span', { class: 'muted' });
    const tabs = h('div', { class: 'segmented', role: 'group', 'aria-label': 'State' },
      STATES.map((st) => h('a', {
        href: `#/topics/${enc(topic)}/${st}${callback ? '?callback=1' : ''}`,
        class: st === state ? 'on' : '', text: st,
      })));
    const kinds = h('div', { class: 'segmented', role: 'group', 'aria-label': 'Kind' },
      h('a', { href: `#/topics/${enc(topic)}/${state}`, class: callback ? '' : 'on', text: 'pull jobs' }),
      h('a', { href: `#/topics/${enc(topic)}/${state}?callback=1`, class: callback ? 'on' : '', text: 'callback jobs' }));
    const tools = h('div', { class: 'toolbar' }, tabs, kinds);
    if (state === 'dead') {
      tools.append(h('button', {
        id: 'kick-all', type: 'button', class: 'danger', text: 'Kick all dead',
        onclick: () => kickAll(topic).then(() => load()),
      }));
    }
    tools.append(h('a', { class: 'button', href: `#/schedule/${enc(topic)}`, text: 'Schedule' }),
      h('a', { class: 'button', href: `#/push?topic=${enc(topic)}`, text: 'Push' }));
    const flow = h('p', { id: 'flow', class: 'muted' });
    const loadFlow = async () => {
      try {
        const st = await api('GET', `v1/topics/${enc(topic)}/settings`);
        if (!alive()) return;
        flow.replaceChildren(h('span', { text: `Flow control: ${describeSettings(st)}` }), ' ',
          pauseButton(topic, st.paused, loadFlow));
      } catch (e) {
        if (alive() && e.status !== 401) showError(e);
      }
    };
    loadFlow();
    const when = { delayed: 'Due', ready: 'Due', reserved: 'Reserved until', dead: 'Due' }[state];
    main.append(
      h('h1', {}, h('span', { class: 'muted', text: 'Topic ' }), topic,
        h('span', { class: 'muted', text: ` · ${state}${callback ? ' callback' : ''} jobs` })),
      flow,
      tools,
      h('div', { class: 'scroll' },
        h('table', { class: 'jobs' },
          h('thead', {}, h('tr', {}, ['Id', when, 'Attempts', 'Priority', 'Body'].map((x) => h('th', { text: x })))),
          tbody)),
      h('div', { class: 'pager' }, prev, pageInfo, next));

    const load = async () => {
      const cursor = cursors[cursors.length - 1];
      let q = `state=${state}&limit=${PAGE_SIZE}`;
      if (cursor) q += `&cursor=${enc(cursor)}`;
      if (callback) q += '&callback=true';
      try {
        const res = await api('GET', `v1/topics/${enc(topic)}/jobs?${q}`);
        if (!alive()) return;
        showError(null);
        const rows = res.jobs.map((j) => h('tr', { dataset: { jobId: j.id } },
          h('td', {}, h('a', { href: `#/jobs/${enc(j.id)}`, class: 'mono', text: j.id })),
          h('td', { title: fmtTime(state === 'reserved' ? j.reserved_until_ms : j.run_at_ms) },
            fmtRelative(state === 'reserved' ? j.reserved_until_ms : j.run_at_ms)),
          h('td', { text: j.max_attempts ? `${j.attempts}/${j.max_attempts}` : j.attempts }),
          h('td', { text: j.priority }),
          h('td', { class: 'mono body', text: j.body.length > 80 ? `${j.body.slice(0, 80)}…` : j.body })));
        if (rows.length === 0) rows.push(h('tr', {}, h('td', { colspan: 5, class: 'muted', text: 'No jobs.' })));
        tbody.replaceChildren(...rows);
        next.disabled = !res.next_cursor;
        next.dataset.cursor = res.next_cursor || '';
        prev.disabled = cursors.length <= 1;
        pageInfo.textContent = `Page ${cursors.length}`;
      } catch (e) {
        if (alive() && e.status !== 401) showError(e);
      }
    };
    next.addEventListener('click', () => {
      if (next.dataset.cursor) { cursors.push(next.dataset.cursor); load(); }
    });
    prev.addEventListener('click', () => {
      if (cursors.length > 1) { cursors.pop(); load(); }
    });
    load();
    return {};
  }

  // A button that pauses or resumes `topic` (after a confirmation), then calls `done`.
  function pauseButton(topic, paused, done) {
    return h('button', {
      type: 'button', class: paused ? 'small resume' : 'small pause', text: paused ? 'Resume' : 'Pause',
      onclick: () => act(
        paused ? `Resume topic “${topic}”: hand out its ready jobs again?` : `Pause topic “${topic}”: hand out none of its jobs (consumers, callbacks) until resumed?`,
        paused ? 'Resume' : 'Pause',
        () => api('PUT', `v1/topics/${enc(topic)}/settings`, { paused: !paused }),
        paused ? 'Resumed.' : 'Paused.').then(done),
    });
  }

  // A topic's flow control in words: "paused · 100/s (burst 10) · at most 5 in flight".
  function describeSettings(s) {
    const parts = [s.paused ? 'paused' : 'running'];
    parts.push(s.rate_per_s === null ? 'no rate limit' : `${s.rate_per_s}/s (burst ${s.burst})`);
    parts.push(s.max_in_flight === null ? 'no limit in flight' : `at most ${s.max_in_flight} in flight`);
    return parts.join(' · ');
  }

  // Kicks every dead job of `topic` (pull, then callback), in rounds of 100 (of 1 on a server
  // whose max_batch is below 100), until a round kicks fewer than it asked for.
  function kickAll(topic) {
    return act(`Kick every dead job of topic “${topic}” back to ready?`, 'Kick all', async () => {
      let kicked = 0;
      let max = 100;
      for (;;) {
        let r;
        try {
          r = await api('POST', `v1/topics/${enc(topic)}/kick`, { max });
        } catch (e) {
          if (e.field === 'max' && max > 1) { max = 1; continue; }
          throw e;
        }
        kicked += r.kicked;
        if (r.kicked < max) return kicked;
      }
    }, (n) => `Kicked ${n} job${n === 1 ? '' : 's'}.`);
  }

  // Recurring schedules (docs/schedules.md): each one's rule, its next runs and last tick, and
  // pause/resume; polled.
  function schedulesPage(main, alive) {
    const body = h('tbody', { id: 'schedules' });
    const updated = h('p', { class: 'muted' });
    main.append(
      h('h1', { text: 'Schedules' }),
      h('div', { class: 'scroll' },
        h('table', {},
          h('thead', {}, h('tr', {},
            ['Schedule', 'Rule', 'Topic', 'State', 'Next runs', 'Last tick', ''].map((t) => h('th', { text: t })))),
          body)),
      updated);
    const rule = (sc) => (sc.cron ? `${sc.cron} (${sc.tz})` : `every ${fmtDuration(sc.every_ms)}`);
    const tick = async () => {
      try {
        const all = [];
        let cursor = null;
        do {
          const page = await api('GET', `v1/schedules?limit=1000${cursor ? `&cursor=${enc(cursor)}` : ''}`);
          all.push(...page.schedules);
          cursor = page.next_cursor;
        } while (cursor && alive());
        if (!alive()) return;
        showError(null);
        const rows = all.map((sc) => {
          const path = `v1/schedules/${enc(sc.id)}`;
          const toggle = h('button', {
            type: 'button', class: 'toggle', text: sc.paused ? 'Resume' : 'Pause',
            onclick: async () => {
              try {
                await api('POST', `${path}/${sc.paused ? 'resume' : 'pause'}`);
                tick();
              } catch (e) {
                if (e.status !== 401) showError(e);
              }
            },
          });
          const next = sc.next_runs_ms.length
            ? h('span', { title: sc.next_runs_ms.map(fmtTime).join('\n') },
              `${fmtTime(sc.next_runs_ms[0])} (${fmtRelative(sc.next_runs_ms[0])})`,
              sc.next_runs_ms.length > 1 ? h('small', { class: 'muted', text: ` then ${fmtTime(sc.next_runs_ms[1])}` }) : null)
            : h('span', { class: 'muted', text: sc.paused ? 'paused' : 'none' });
          return h('tr', { dataset: { scheduleId: sc.id } },
            h('th', { scope: 'row', class: 'mono', text: sc.id }),
            h('td', { class: 'mono', text: rule(sc) }),
            h('td', {}, h('a', { href: `#/topics/${enc(sc.job.topic)}/ready`, text: sc.job.topic })),
            h('td', { class: 'state', text: sc.paused ? 'paused' : 'active' }),
            h('td', { class: 'next' }, next),
            h('td', { class: 'last', text: sc.last_tick_ms === null ? '–' : `${fmtTime(sc.last_tick_ms)} (${fmtRelative(sc.last_tick_ms)})` }),
            h('td', {}, toggle));
        });
        if (rows.length === 0) {
          rows.push(h('tr', {}, h('td', { colspan: 7, class: 'muted', text: 'No schedules. Create one with PUT /v1/schedules/{id} or delayq schedule put.' })));
        }
        body.replaceChildren(...rows);
        updated.textContent = `Updated ${fmtTime(Date.now())}; refreshed every ${SCHEDULE_POLL_MS / 1000} s.`;
      } catch (e) {
        if (alive() && e.status !== 401) showError(e);
      }
    };
    return poll(alive, SCHEDULE_POLL_MS, tick);
  }

  // One job: every field, its actions, its history.
  function jobPage(main, alive, id) {
    const fields = h('dl', { id: 'job-fields', class: 'fields' });
    const actions = h('div', { class: 'toolbar', id: 'job-actions' });
    const history = h('div', { id: 'history' });
    main.append(h('h1', {}, h('span', { class: 'muted', text: 'Job ' }), h('span', { class: 'mono', text: id })),
      fields, actions, h('h2', { text: 'History' }), history);
    const path = `v1/jobs/${enc(id)}`;

    const load = async () => {
      let job;
      try {
        job = await api('GET', path);
      } catch (e) {
        if (!alive() || e.status === 401) return;
        fields.replaceChildren();
        actions.replaceChildren();
        showError(e);
        return;
      }
      if (!alive()) return;
      showError(null);
      render(job);
      loadHistory();
    };

    const row = (name, ...value) => [h('dt', { text: name }), h('dd', { dataset: { field: name } }, ...value)];
    const time = (ms) => (ms === null || ms === undefined ? '–' : `${fmtTime(ms)} (${fmtRelative(ms)})`);

    function render(job) {
      const list = job.callback ? '?callback=1' : '';
      fields.replaceChildren(
        ...row('id', h('span', { class: 'mono', text: job.id })),
        ...row('topic', h('a', { href: `#/topics/${enc(job.topic)}/delayed${list}`, text: job.topic })),
        ...row('state', h('a', { id: 'job-state', class: `state ${job.state}`, href: `#/topics/${enc(job.topic)}/${job.state}${list}`, text: job.state })),
        ...row('run_at_ms', time(job.run_at_ms)),
        ...row('reserved_until_ms', time(job.reserved_until_ms)),
        ...row('attempts', `${job.attempts}${job.max_attempts ? ` of at most ${job.max_attempts}` : ' (no limit)'}`),
        ...row('max_attempts', job.max_attempts),
        ...row('backoff_ms', job.backoff_ms.length ? job.backoff_ms.map(fmtDuration).join(', ') : '–'),
        ...row('ttr_ms', `${job.ttr_ms} (${fmtDuration(job.ttr_ms)})`),
        ...row('priority', job.priority),
        ...row('callback', job.callback ? `${job.callback.url} (timeout ${fmtDuration(job.callback.timeout_ms)})` : '–'),
        ...row('body', h('pre', { id: 'job-body', text: job.body })));
      const buttons = [];
      if (job.state === 'dead') {
        buttons.push(h('button', {
          id: 'kick', type: 'button', text: 'Kick',
          onclick: () => act(`Kick job “${job.id}” back to ready?`, 'Kick',
            () => api('POST', `${path}/kick`), 'Kicked.').then(load),
        }));
      } else {
        buttons.push(h('button', {
          id: 'bury', type: 'button', text: 'Bury',
          onclick: () => act(`Bury job “${job.id}” (make it dead)?`, 'Bury',
            () => api('POST', `${path}/bury`), 'Buried.').then(load),
        }));
      }
      if (job.state === 'delayed' || job.state === 'ready') {
        const picker = h('input', {
          id: 'reschedule-at', type: 'datetime-local', 'aria-label': 'New due time',
          value: toLocalInput(Math.max(job.run_at_ms, Date.now())),
        });
        buttons.push(h('form', {
          class: 'inline',
          onsubmit: (ev) => {
            ev.preventDefault();
            const at = new Date(picker.value).getTime();
            if (!Number.isFinite(at)) { showError(new Error('Pick a date and time.')); return; }
            act(`Reschedule job “${job.id}” to ${fmtTime(at)}?`, 'Reschedule',
              () => api('POST', `${path}/reschedule`, { run_at_ms: at }), 'Rescheduled.').then(load);
          },
        }, picker, h('button', { id: 'reschedule', type: 'submit', text: 'Reschedule' })));
      }
      buttons.push(h('button', {
        id: 'delete', type: 'button', class: 'danger', text: 'Delete',
        onclick: async () => {
          const done = await act(`Delete job “${job.id}”? This cannot be undone.`, 'Delete',
            () => api('DELETE', path).then(() => true), 'Deleted.');
          if (done) location.hash = `#/topics/${enc(job.topic)}/${job.state}${list}`;
        },
      }));
      actions.replaceChildren(...buttons);
    }

    async function loadHistory() {
      try {
        const res = await api('GET', `${path}/history`);
        if (!alive()) return;
        const rows = res.history.map((x) => h('tr', {},
          h('td', { text: fmtTime(x.at_ms) }), h('td', { text: x.from === null ? '(pushed)' : x.from }),
          h('td', { text: x.to === null ? '–' : x.to }), h('td', { class: 'mono', text: x.instance || '' })));
        history.replaceChildren(h('div', { class: 'scroll' }, h('table', {},
          h('thead', {}, h('tr', {}, ['At', 'From', 'To', 'Instance'].map((x) => h('th', { text: x })))),
          h('tbody', {}, rows))));
      } catch (e) {
        if (!alive() || e.status === 401) return;
        let text;
        if (e.code === 'journal_disabled') text = 'No journal: this server keeps no history (see the journal setting).';
        else if (e.status === 404) text = 'No history recorded for this job.';
        else text = `History unavailable: ${e.message}`;
        history.replaceChildren(h('p', { class: 'muted', id: 'history-note', text }));
      }
    }

    load();
    return {};
  }

  // Push a job (for trying things out).
  function pushForm(main, alive, topic) {
    const input = (id, attrs) => h('input', { id, name: id, ...attrs });
    const f = {
      topic: input('push-topic', { required: true, value: topic || '', autocomplete: 'off' }),
      id: input('push-id', { placeholder: 'a new UUIDv7', autocomplete: 'off' }),
      body: h('textarea', { id: 'push-body', rows: 4 }),
      delay: input('push-delay', { type: 'number', min: 0, step: 'any', value: 0 }),
      at: input('push-at', { type: 'datetime-local' }),
      priority: input('push-priority', { type: 'number', min: 0, placeholder: '1024' }),
      ttr: input('push-ttr', { type: 'number', min: 1, placeholder: '60000' }),
      attempts: input('push-max-attempts', { type: 'number', min: 0, placeholder: '0 (no limit)' }),
    };
    const label = (el, text, hint) => h('label', { for: el.id }, text, hint ? h('small', { text: hint }) : null);
    const form = h('form', { id: 'push-form', class: 'card form' },
      label(f.topic, 'Topic'), f.topic,
      label(f.id, 'Id', 'optional'), f.id,
      label(f.body, 'Body'), f.body,
      label(f.delay, 'Delay (seconds)', 'ignored when a due time is set'), f.delay,
      label(f.at, 'Due at', 'optional, local time'), f.at,
      label(f.priority, 'Priority', '0 is most urgent'), f.priority,
      label(f.ttr, 'Time to run (ms)'), f.ttr,
      label(f.attempts, 'Max attempts'), f.attempts,
      h('div', {}, h('button', { id: 'push-submit', type: 'submit', text: 'Push' })));
    main.append(h('h1', { text: 'Push a job' }), form);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const job = { topic: f.topic.value.trim(), body: f.body.value };
      if (f.id.value.trim()) job.id = f.id.value.trim();
      if (f.at.value) job.run_at_ms = new Date(f.at.value).getTime();
      else job.delay_ms = Math.round(Number(f.delay.value || 0) * 1000);
      if (f.priority.value !== '') job.priority = Number(f.priority.value);
      if (f.ttr.value !== '') job.ttr_ms = Number(f.ttr.value);
      if (f.attempts.value !== '') job.max_attempts = Number(f.attempts.value);
      const when = job.run_at_ms !== undefined ? `at ${fmtTime(job.run_at_ms)}` :
        (job.delay_ms ? `in ${fmtDuration(job.delay_ms)}` : 'now');
      const pushed = await act(`Push a job to topic “${job.topic}”, due ${when}?`, 'Push',
        () => api('POST', 'v1/jobs', job), 'Pushed.');
      if (pushed && alive()) location.hash = `#/jobs/${enc(pushed.id)}`;
    });
    f.topic.focus();
    return {};
  }

  // ---- routing: #/, #/schedule[/topic][?range=], #/schedules, #/topics/<t>/<state>[?callback=1], #/jobs/<id>, #/push ----

  function route() {
    showError(null);
    const raw = location.hash.replace(/^#/, '') || '/';
    const [pathPart, queryPart] = raw.split('?');
    const query = new URLSearchParams(queryPart || '');
    const parts = pathPart.split('/').slice(1).map((p) => {
      try { return decodeURIComponent(p); } catch (_) { return p; }
    });
    let name = 'overview';
    if (parts[0] === 'schedules') {
      name = 'schedules';
      mount(schedulesPage);
    } else if (parts[0] === 'schedule') {
      name = 'schedule';
      mount((m, alive) => schedule(m, alive, parts[1] || '', query.get('range') || 'hour'));
    } else if (parts[0] === 'topics' && parts[1] && STATES.includes(parts[2])) {
      name = 'topic';
      mount((m, alive) => jobList(m, alive, parts[1], parts[2], query.get('callback') === '1'));
    } else if (parts[0] === 'jobs' && parts.length >= 2 && parts.slice(1).join('/')) {
      name = 'job';
      mount((m, alive) => jobPage(m, alive, parts.slice(1).join('/')));
    } else if (parts[0] === 'push') {
      name = 'push';
      mount((m, alive) => pushForm(m, alive, query.get('topic') || ''));
    } else {
      mount(overview);
    }
    for (const a of document.querySelectorAll('#nav a')) {
      a.classList.toggle('on', a.dataset.view === name);
    }
  }

  // Whether the server lets us in (with the stored token, or without one); then the route.
  async function start() {
    try {
      await api('GET', 'v1/stats');
    } catch (e) {
      if (e.status === 401) return; // the sign-in form is shown
      showError(e); // still show the page: the view will show its own errors
    }
    signedIn();
    route();
  }

  document.addEventListener('DOMContentLoaded', () => {
    window.addEventListener('hashchange', () => { if ($('login').hidden) route(); });
    $('login-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const token = $('token').value.trim();
      if (!token) return;
      sessionStorage.setItem(TOKEN_KEY, token);
      start();
    });
    $('sign-out').addEventListener('click', () => {
      sessionStorage.removeItem(TOKEN_KEY);
      showLogin(false);
    });
    $('search').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const id = $('search-id').value.trim();
      if (id) location.hash = `#/jobs/${enc(id)}`;
    });
    start();
  });
})();
