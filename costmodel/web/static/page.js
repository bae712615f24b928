// costmodel's page: a form over the library's views (the JSON API /api/v1), whose state is the URL; charts by
// plotly.js; results pinned side by side. Every value reaches the page through textContent or plotly, never as HTML.
'use strict';
const SPEC = JSON.parse(document.getElementById('form-spec').textContent);
const CHOICES = JSON.parse(document.getElementById('choices').textContent);
const USES = JSON.parse(document.getElementById('uses').textContent);  // view -> the fields it reads
const SAVED = JSON.parse(document.getElementById('saved').textContent);  // an offline file's views, or null
const LISTS = ['gpu', 'concurrency', 'request-rate'];
const form = document.getElementById('form');
const $ = (id) => document.getElementById(id);
let current = null;  // {query, view}
let pinned = [];  // [{query, view}]
let running = null;  // the job being waited for
// plotly.js: inline in a saved page, else this server's copy (fetched with the page, run once the first numbers
// show: compiling it takes the page's thread for a while)
let plotly = null;
function loadPlotly() {
  plotly = plotly || new Promise((resolve, reject) => {
    if (window.Plotly) { resolve(); return; }
    const tag = element('script', { src: '/static/plotly.min.js' });
    tag.addEventListener('load', resolve);
    tag.addEventListener('error', reject);
    document.head.appendChild(tag);
  });
  return plotly;
}

function flat(prop) {  // a field's schema with its null choice taken out: {type, enum, nullable, ...}
  if (!prop.anyOf) return { ...prop, nullable: false };
  const kinds = prop.anyOf.filter((p) => p.type !== 'null');
  return { ...prop, ...kinds[0], nullable: kinds.length < prop.anyOf.length };
}

function element(tag, attrs = {}, text = null) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== null) e.textContent = text;
  return e;
}

function input(name, prop) {  // the control for one field
  const p = flat(prop);
  if (p.enum || p.type === 'boolean' && p.nullable) {
    const select = element('select', { name });
    const values = p.enum || ['true', 'false'];
    if (p.nullable) select.appendChild(element('option', { value: '' }, '(default)'));
    for (const v of values) {
      const option = element('option', { value: String(v) }, String(v));
      option.defaultSelected = v === p.default;  // what the form's reset comes back to
      select.appendChild(option);
    }
    return select;
  }
  if (p.type === 'boolean') return element('input', { name, type: 'checkbox' });
  if (name === 'config') return element('textarea', { name, rows: 2, cols: 24, placeholder: '{"hidden_size": ...}' });
  const attrs = { name };
  if (p.type === 'integer' || p.type === 'number') {
    Object.assign(attrs, { type: 'number', step: p.type === 'integer' ? '1' : 'any' });
    if (p.minimum !== undefined) attrs.min = p.minimum;
    if (p.maximum !== undefined) attrs.max = p.maximum;
  }
  if (CHOICES[name]) attrs.list = 'list-' + name;
  const box = element('input', attrs);
  if (p.default !== undefined && p.default !== null) box.placeholder = [].concat(p.default).join(',');
  return box;
}

function buildForm() {
  for (const [name, values] of Object.entries(CHOICES)) {
    const list = element('datalist', { id: 'list-' + name });
    for (const v of values) list.appendChild(element('option', { value: v }));
    document.body.appendChild(list);
  }
  for (const [group, fields] of Object.entries(SPEC)) {
    const set = element('fieldset');
    set.appendChild(element('legend', {}, group));
    for (const [name, prop] of Object.entries(fields)) {
      const label = element('label', { 'data-field': name });
      label.appendChild(element('span', {}, `${prop.description || name} (${name})`));
      label.appendChild(input(name, prop));
      const d = flat(prop).default;
      label.appendChild(element('small', {}, d === null || d === undefined ? 'default: none' : `default: ${[].concat(d)}`));
      label.appendChild(element('span', { class: 'field-error' }));
      set.appendChild(label);
    }
    form.appendChild(set);
  }
  form.elements.view.addEventListener('change', shownFields);
}

function shownFields() {  // only the fields the chosen view reads are shown, and go in its URL
  const uses = new Set(['view', ...USES[form.elements.view.value]]);
  for (const label of form.querySelectorAll('label[data-field]')) label.hidden = !uses.has(label.dataset.field);
  for (const set of form.querySelectorAll('fieldset')) set.hidden = ![...set.querySelectorAll('label')].some((l) => !l.hidden);
  return uses;
}

function readForm() {  // the fields given that the view reads, as a query's pairs
  const query = new URLSearchParams();
  const uses = shownFields();
  for (const field of form.elements) {
    if (!field.name || !uses.has(field.name)) continue;
    if (field.type === 'checkbox') { if (field.checked) query.append(field.name, 'true'); }
    else if (field.value !== '') query.append(field.name, field.value);
  }
  return query;
}

function fillForm(query) {
  form.reset();
  form.elements.view.value = query.get('view') || 'served';
  for (const [key, value] of query) {
    const field = form.elements[key];
    if (!field) continue;
    if (field.type === 'checkbox') field.checked = value !== 'false';
    else field.value = field.value && LISTS.includes(key) ? field.value + ',' + value : value;
  }
}

function body(query) {  // a query as the API's JSON request
  const out = {};
  for (const [key, value] of query) {
    if (LISTS.includes(key)) out[key] = (out[key] || []).concat(value.split(',').filter((v) => v));
    else out[key] = value;
  }
  return out;
}

function showErrors(fields) {
  const general = [];
  for (const { field, message } of fields) {
    const label = form.querySelector(`label[data-field="${CSS.escape(field)}"]`);
    if (label) { label.classList.add('invalid'); label.querySelector('.field-error').textContent = message; }
    else general.push(message);
  }
  $('error').textContent = general.join('\n');
}

function clearErrors() {
  $('error').textContent = '';
  for (const label of form.querySelectorAll('label.invalid')) {
    label.classList.remove('invalid');
    label.querySelector('.field-error').textContent = '';
  }
}

async function compute(query) {  // the view of query: {view} or {error, fields}
  let response = await fetch('/api/v1/jobs', { method: 'POST', headers: { 'content-type': 'application/json' },
    body: JSON.stringify(body(query)) });
  let answer = await response.json();
  running = answer.id ? answer : null;
  $('cancel').hidden = !running;
  let polls = 0;
  while (response.status === 202) {
    const p = answer.progress || {};
    $('progress').textContent = p.total ? `${p.what}: ${p.done} of ${p.total} (${answer.seconds} s)` : `computing (${answer.seconds} s)`;
    await new Promise((r) => setTimeout(r, Math.min(40 + 20 * (polls += 1), 250)));
    response = await fetch('/api/v1/jobs/' + answer.id);
    answer = await response.json();
  }
  running = null;
  $('cancel').hidden = true;
  $('progress').textContent = '';
  if (!response.ok) return { error: answer.error || response.statusText, fields: answer.fields || [] };
  return { view: answer.view };
}

async function show(query, push) {
  clearErrors();
  if (push) history.pushState(null, '', '?' + urlOf(query, pinned));
  $('show').disabled = true;
  try {
    const done = await compute(query);
    if (done.error) { showErrors(done.fields.length ? done.fields : [{ field: '', message: done.error }]); return; }
    current = { query: query.toString(), view: done.view };
    for (const pin of pinned) if (!pin.view) { const d = await compute(new URLSearchParams(pin.query)); pin.view = d.view; }
    render();
  } finally { $('show').disabled = false; }
}

function urlOf(query, pins) {
  const url = new URLSearchParams(query);
  for (const pin of pins) url.append('pin', pin.query);
  return url.toString();
}

function labels(configs) {  // each configuration named by the fields that tell them apart
  const maps = configs.map((c) => c.view.request);
  const keys = Object.keys(maps[0]).filter((k) => maps.some((m) => JSON.stringify(m[k]) !== JSON.stringify(maps[0][k])));
  return maps.map((m, i) => keys.length ? keys.map((k) => `${k}=${[].concat(m[k])}`).join(' ') : `#${i + 1}`);
}

function render() {
  const configs = [...pinned.filter((p) => p.view), current];
  const names = labels(configs);
  const same = configs.filter((c) => c.view.view === current.view.view);
  $('result').hidden = false;
  $('title').textContent = current.view.title;
  $('command').textContent = current.view.command;
  renderSummary(current.view);
  renderCompare(configs, names);
  renderTables(current.view);
  window.shownAt = performance.now();  // the numbers are on the page (benchmarks/web_page.py reads it)
  // the charts once the numbers are painted
  requestAnimationFrame(() => setTimeout(() => renderCharts(same, same.map((c) => names[configs.indexOf(c)])), 0));
  renderPins();
  downloads();
  $('pin').disabled = SAVED !== null;
}

function fmt(v) {
  if (typeof v !== 'number') return v === null || v === undefined ? '' : String(v);
  if (Number.isInteger(v)) return String(v);
  return Math.abs(v) >= 100 ? v.toFixed(0) : Math.abs(v) >= 1 ? v.toPrecision(4) : v.toPrecision(3);
}

function renderSummary(view) {
  const box = $('summary');
  box.replaceChildren();
  for (const s of view.summary) {
    const card = element('div', { class: 'card', 'data-key': s.key });
    card.appendChild(element('small', {}, `${s.label}${s.unit ? ' (' + s.unit + ')' : ''}`));
    card.appendChild(element('b', {}, fmt(s.value)));
    box.appendChild(card);
  }
}

function renderCompare(configs, names) {  // the numbers of every pinned result side by side, and their change
  const box = $('compare');
  box.replaceChildren();
  if (configs.length < 2) return;
  const keys = [...new Map(configs.flatMap((c) => c.view.summary.map((s) => [s.key, s]))).values()];
  const columns = [{ key: 'what', label: 'result', unit: '' }];
  const rows = configs.map((c, i) => {
    const row = { what: names[i] };
    for (const s of c.view.summary) row[s.key] = s.value;
    return row;
  });
  for (const s of keys) columns.push({ key: s.key, label: s.label, unit: s.unit });
  const first = rows[0];
  for (const row of rows.slice(1)) {  // the change against the first
    const diff = { what: `${row.what} vs ${first.what} (%)` };
    for (const s of keys) if (typeof row[s.key] === 'number' && first[s.key]) diff[s.key] = 100 * (row[s.key] / first[s.key] - 1);
    rows.push(diff);
  }
  box.appendChild(element('h3', {}, 'compared'));
  box.appendChild(table({ name: 'compare', columns, rows }));
}

function renderCharts(configs, names) {
  const box = $('charts');
  box.replaceChildren();
  for (const chart of configs[configs.length - 1].view.charts) {
    const div = element('div', { class: 'chart', id: 'chart-' + chart.id, 'data-chart': chart.id });
    box.appendChild(div);
    const data = [];
    configs.forEach((c, i) => {
      const mine = c.view.charts.find((x) => x.id === chart.id);
      if (!mine) return;
      for (const trace of mine.data) {  // each configuration its own dash, where a series has its colour fixed
        const dash = ['solid', 'dash', 'dot', 'dashdot'][i % 4];
        data.push(configs.length > 1 ? { ...trace, name: `${names[i]}: ${trace.name}`, legendgroup: names[i],
          line: { ...(trace.line || {}), dash } } : trace);
      }
    });
    loadPlotly().then(() => window.Plotly ? Plotly.newPlot(div, data, chart.layout, { responsive: true, displaylogo: false })
      : Promise.reject()).catch(() => { div.textContent = 'plotly.js is not installed (python -m pip install -e ".[web]")'; });
  }
}

function table(t) {  // a sortable table: a header's click sorts by it
  const el = element('table', { 'data-table': t.name });
  const head = el.createTHead().insertRow();
  const tbody = el.createTBody();
  const fill = (rows) => {
    tbody.replaceChildren();
    for (const r of rows) {
      const tr = tbody.insertRow();
      for (const c of t.columns) {
        const td = tr.insertCell();
        if (c.key === 'open' && r.open) {  // a link to this row's own view on the page
          td.appendChild(element('a', { href: '?' + r.open }, 'open'));
        } else td.textContent = fmt(r[c.key]);
        if (typeof r[c.key] !== 'number') td.className = 'text';
      }
    }
  };
  t.columns.forEach((c) => {
    const th = element('th', { scope: 'col', 'data-key': c.key }, c.unit ? `${c.label} (${c.unit})` : c.label);
    th.addEventListener('click', () => {
      const up = th.getAttribute('aria-sort') !== 'ascending';
      for (const other of head.cells) other.removeAttribute('aria-sort');
      th.setAttribute('aria-sort', up ? 'ascending' : 'descending');
      const key = (r) => r[c.key] === null || r[c.key] === undefined ? '' : r[c.key];
      fill([...t.rows].sort((a, b) => (key(a) > key(b) ? 1 : key(a) < key(b) ? -1 : 0) * (up ? 1 : -1)));
    });
    head.appendChild(th);
  });
  fill(t.rows);
  return el;
}

function renderTables(view) {
  const box = $('tables');
  box.replaceChildren();
  for (const t of view.tables) { box.appendChild(element('h3', {}, t.name)); box.appendChild(table(t)); }
}

function renderPins() {
  const box = $('pins');
  box.replaceChildren();
  $('clear-pins').hidden = pinned.length === 0;
  if (!pinned.length) return;
  box.appendChild(element('span', {}, 'pinned: '));
  const names = labels([...pinned.filter((p) => p.view), current]);
  pinned.forEach((pin, i) => {
    const chip = element('span', { class: 'pin' }, names[i] || pin.query);
    if (SAVED === null) {
      const x = element('button', { type: 'button', title: 'unpin', 'aria-label': 'unpin' }, '×');
      x.addEventListener('click', () => { pinned.splice(i, 1); history.replaceState(null, '', '?' + urlOf(current.query, pinned)); render(); });
      chip.appendChild(x);
    }
    box.appendChild(chip);
  });
}

function csv(t) {
  const cell = (v) => { const s = fmt(v); return /[",\n]/.test(s) ? `"${s.replace(/"/g, '""')}"` : s; };
  const head = t.columns.map((c) => cell(c.unit ? `${c.label} (${c.unit})` : c.label)).join(',');
  return [head, ...t.rows.map((r) => t.columns.map((c) => cell(r[c.key])).join(','))].join('\n') + '\n';
}

function downloads() {
  const blob = (text, type) => URL.createObjectURL(new Blob([text], { type }));
  $('download-json').href = blob(JSON.stringify(current.view.report, null, 2), 'application/json');
  $('download-csv').href = blob(csv(current.view.tables[0]), 'text/csv');
  $('download-html').hidden = SAVED !== null;
  $('download-html').href = '/export?' + urlOf(current.query, pinned);
}

form.addEventListener('submit', (event) => { event.preventDefault(); show(readForm(), true); });
$('pin').addEventListener('click', () => {
  if (!current) return;
  pinned.push(current);
  history.replaceState(null, '', '?' + urlOf(current.query, pinned));
  render();
});
$('clear-pins').addEventListener('click', () => { pinned = []; history.replaceState(null, '', '?' + urlOf(current.query, [])); render(); });
$('cancel').addEventListener('click', async () => {
  if (running) await fetch('/api/v1/jobs/' + running.id, { method: 'DELETE' });
});
$('copy').addEventListener('click', () => navigator.clipboard && navigator.clipboard.writeText($('command').textContent));

function start() {
  buildForm();
  if (SAVED !== null) {  // an offline file: its views, no form to send
    $('offline-note').hidden = false;
    form.hidden = true;
    $('actions').hidden = true;
    pinned = SAVED.pins;
    current = SAVED.current;
    render();
    return;
  }
  const url = new URLSearchParams(window.location.search);
  pinned = url.getAll('pin').map((query) => ({ query, view: null }));
  url.delete('pin');
  fillForm(url);
  shownFields();
  if ([...url.keys()].length) show(url, false);
}
window.addEventListener('popstate', () => window.location.reload());
start();
