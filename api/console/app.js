// gpupack's web console: one page, hash routes, plain JavaScript (no framework, nothing fetched from elsewhere).
//
// Pages: #/clusters, #/instances, #/tasks, #/task/<ARN>, #/explain, and #/services, #/service/<ARN> (services.js,
// loaded after this file, adds those two to PAGES). Each page has a `load` that fetches its data
// and draws it; the page polls once a second, and the console's reads (/console/api/...) answer
// {"unchanged": true} when the version it passes as `since` is still current, so an idle console redraws
// nothing. Every call carries the X-Gpupack-Console header; with --credentials the server also wants the session
// cookie that POST /console/session set (HttpOnly: this script never sees it). A 401 brings the login form back.
//
// Everything the server answers is text from users or agents (names, reasons, log lines): it goes into the page
// only through esc() or textContent.
'use strict';

const ECS_PREFIX = 'AmazonEC2ContainerServiceV20141113.';
const CONSOLE_HEADER = { 'X-Gpupack-Console': '1' };
const POLL_MS = 1000;

const app = {
  me: null, // GET /console/session: {authRequired, loggedIn, accessKeyId, role, canWrite}
  page: null, // the current page's {name, params, load(force)}
  versions: {}, // console read path -> the last version drawn
  timer: null,
  busy: false,
};

// ---- helpers -------------------------------------------------------------------------------------------------

// imageCell: a container's image, struck through with a word when the process runtime ran its command on the host
// instead (the image "host" says that on purpose).
function imageCell(image, runtime) {
  if (runtime !== 'process' || image === 'host') return esc(image);
  return `<s class="image-unused">${esc(image)}</s> <span class="muted">not used: process runtime, ran on the host</span>`;
}

function esc(v) {
  return String(v ?? '').replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
}
function num(n) {
  return Number(n ?? 0).toLocaleString('en-US');
}
function mib(n) {
  return `${num(n)} MiB`;
}
function pct(part, whole) {
  return whole > 0 ? Math.round((100 * part) / whole) : 0;
}
function when(ms) {
  if (!ms) return '';
  return new Date(ms).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}
function whenSeconds(s) {
  return s ? when(s * 1000) : '';
}
function shortId(id) {
  return String(id ?? '').slice(0, 8);
}
// shortGpu: "GPU-3f1c9a2e-...-7b21d4e0c9f1" as "3f1c9a2e…c9f1" (the two ends tell a host's GPUs apart).
function shortGpu(id) {
  const s = String(id ?? '').replace(/^GPU-/, '');
  return s.length > 14 ? `${s.slice(0, 8)}…${s.slice(-4)}` : s;
}
function lastSegment(arn) {
  const s = String(arn ?? '');
  return s.slice(s.lastIndexOf('/') + 1);
}
function qs(params) {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') p.set(k, v);
  const s = p.toString();
  return s ? `?${s}` : '';
}
function $(sel) {
  return document.querySelector(sel);
}
// draw replaces `el`'s content with `html` and sizes its bars: the Content-Security-Policy allows no inline
// style attributes, so widths travel as data-width (percent) and are set here through the DOM.
function draw(el, html) {
  el.innerHTML = html;
  for (const x of el.querySelectorAll('[data-width]')) x.style.width = `${x.dataset.width}%`;
}
function setStatus(text) {
  const el = $('#status');
  if (el) el.textContent = text;
}

class NeedLogin extends Error {}

// read: one console read; null when unchanged since the last one drawn (unless `force`).
async function read(path, params = {}, force = false) {
  const key = path + qs(params);
  const since = force ? undefined : app.versions[key];
  const res = await fetch(path + qs({ ...params, since }), { headers: CONSOLE_HEADER, cache: 'no-store' });
  if (res.status === 401) throw new NeedLogin();
  const body = await res.json();
  if (!res.ok) throw new Error(`${path}: ${body.message ?? res.status}`);
  if (body.unchanged) return null;
  app.versions[key] = body.version;
  return body;
}

// ecs: one call of the ECS JSON API (or another service's `target`) as the console's session. Resolves
// {ok, status, json}; a 401 throws NeedLogin.
async function ecs(operation, body = {}, target = ECS_PREFIX + operation) {
  const res = await fetch('/', {
    method: 'POST',
    headers: { ...CONSOLE_HEADER, 'Content-Type': 'application/x-amz-json-1.1', 'X-Amz-Target': target },
    body: JSON.stringify(body),
    cache: 'no-store',
  });
  if (res.status === 401) throw new NeedLogin();
  let json;
  try {
    json = await res.json();
  } catch {
    json = {};
  }
  return { ok: res.ok, status: res.status, json };
}

function errorType(json) {
  return String(json?.__type ?? '').split('#').pop();
}

// ---- session -------------------------------------------------------------------------------------------------

async function loadMe() {
  const res = await fetch('/console/session', { headers: CONSOLE_HEADER, cache: 'no-store' });
  app.me = await res.json();
  drawWho();
}

function drawWho() {
  const el = $('#who');
  const me = app.me;
  if (!me || !me.authRequired) {
    el.innerHTML = '<span class="muted">open server (no --credentials)</span>';
  } else if (!me.loggedIn) {
    el.innerHTML = '';
  } else {
    el.innerHTML = `<span id="whoami" data-role="${esc(me.role)}">${esc(me.accessKeyId)} · ${esc(me.role)}${
      me.canWrite ? '' : ' (read only)'
    }</span> <button id="logout" type="button">Log out</button>`;
    $('#logout').onclick = logout;
  }
}

function showLogin(message = '') {
  stopPolling();
  app.page = null;
  app.me = { ...(app.me ?? {}), loggedIn: false };
  drawWho();
  $('#main').innerHTML = `
    <form id="login" class="card narrow" method="post" action="/console/session" autocomplete="off">
      <h1>Log in</h1>
      <p class="muted">An access key of this server's credentials file. Admin keys may stop tasks; every other
      key reads.</p>
      <label>Access key id <input id="login-key" required autocomplete="username"></label>
      <label>Secret access key <input id="login-secret" type="password" required
        autocomplete="current-password"></label>
      <button type="submit">Log in</button>
      <p id="login-error" class="error">${esc(message)}</p>
    </form>`;
  // The fields have no name and the form posts: even submitted without this script, no secret lands in a URL.
  $('#login').onsubmit = async (ev) => {
    ev.preventDefault();
    const res = await fetch('/console/session', {
      method: 'POST',
      headers: { ...CONSOLE_HEADER, 'Content-Type': 'application/json' },
      body: JSON.stringify({ accessKeyId: $('#login-key').value, secretAccessKey: $('#login-secret').value }),
    });
    const body = await res.json().catch(() => ({}));
    if (!res.ok) {
      $('#login-error').textContent = body.message ?? `refused (${res.status})`;
      return;
    }
    app.me = body;
    app.versions = {};
    drawWho();
    route();
  };
}

async function logout() {
  await fetch('/console/session', { method: 'DELETE', headers: CONSOLE_HEADER });
  app.versions = {};
  showLogin('Logged out.');
}

// ---- routing and polling -------------------------------------------------------------------------------------

const PAGES = { clusters: clustersPage, instances: instancesPage, tasks: tasksPage, task: taskPage, explain: explainPage };

function parseHash() {
  const h = location.hash.replace(/^#\/?/, '');
  const [pathPart, query = ''] = h.split('?');
  const [name, ...rest] = pathPart.split('/');
  const params = Object.fromEntries(new URLSearchParams(query));
  if (rest.length) params.id = decodeURIComponent(rest.join('/'));
  return { name: PAGES[name] ? name : 'clusters', params };
}

function setHash(name, params = {}) {
  const target = `#/${name}${qs(params)}`;
  if (location.hash !== target) location.hash = target;
  else route();
}

async function route() {
  if (app.me?.authRequired && !app.me.loggedIn) return showLogin();
  const { name, params } = parseHash();
  // A task's page is under Tasks, a service's under Services.
  for (const a of document.querySelectorAll('#nav a')) {
    a.classList.toggle('active', a.dataset.page === name || a.dataset.page === `${name}s`);
  }
  stopPolling();
  app.versions = {};
  const page = PAGES[name](params);
  app.page = page;
  document.body.dataset.page = name;
  await tick(true);
  startPolling();
}

async function tick(force = false) {
  const page = app.page;
  if (!page || app.busy) return;
  app.busy = true;
  try {
    await page.load(force);
    if (page === app.page) setStatus(`updated ${new Date().toLocaleTimeString()}`);
  } catch (e) {
    if (e instanceof NeedLogin) showLogin('Your session ended: log in again.');
    else setStatus(`error: ${e.message}`);
  } finally {
    app.busy = false;
  }
}

function startPolling() {
  stopPolling();
  app.timer = setInterval(() => tick(false), POLL_MS);
}
function stopPolling() {
  if (app.timer) clearInterval(app.timer);
  app.timer = null;
}

// ---- clusters ------------------------------------------------------------------------------------------------

function bar(part, whole) {
  const p = pct(part, whole);
  return `<span class="bar" title="${p}%"><span data-width="${p}"></span></span>`;
}

function clustersPage() {
  $('#main').innerHTML = '<h1>Clusters</h1><div id="clusters"></div>';
  let lastFull = 0;
  return {
    async load(force) {
      // The count of refusals in the last hour moves with the clock alone: a full read every 30 s.
      const full = force || Date.now() - lastFull > 30000;
      const data = await read('/console/api/overview', {}, full);
      if (!data) return;
      lastFull = Date.now();
      const rows = data.clusters
        .map(
          (c) => `
        <tr data-cluster="${esc(c.name)}">
          <td><a href="#/instances${esc(qs({ cluster: c.name }))}">${esc(c.name)}</a></td>
          <td>${esc(c.status)}</td>
          <td data-field="instances" data-value="${c.instances}">${num(c.instances)}
            <span class="muted">(${num(c.connectedAgents)} connected)</span></td>
          <td data-field="gpus" data-value="${c.gpus}">${num(c.gpus)}
            <span class="muted">${num(c.sharedGpus)} MPS · ${num(c.dedicatedGpus)} dedicated${
              c.heldGpus ? ` · <span class="warn">${num(c.heldGpus)} held</span>` : ''
            }</span></td>
          <td data-field="gpuMemory" data-allocated="${c.gpuMemoryAllocated}" data-total="${c.gpuMemoryTotal}">
            ${bar(c.gpuMemoryAllocated, c.gpuMemoryTotal)} ${mib(c.gpuMemoryAllocated)} / ${mib(c.gpuMemoryTotal)}</td>
          <td><a href="#/tasks${esc(qs({ cluster: c.name, status: 'PENDING' }))}" data-field="PENDING"
            data-value="${c.tasks.PENDING}">${num(c.tasks.PENDING)}</a></td>
          <td><a href="#/tasks${esc(qs({ cluster: c.name, status: 'RUNNING' }))}" data-field="RUNNING"
            data-value="${c.tasks.RUNNING}">${num(c.tasks.RUNNING)}</a></td>
          <td><a href="#/tasks${esc(qs({ cluster: c.name, status: 'STOPPED' }))}" data-field="STOPPED"
            data-value="${c.tasks.STOPPED}">${num(c.tasks.STOPPED)}</a></td>
          <td data-field="refused" data-value="${c.refusedLastHour}">${
            c.refusedLastHour ? `<a class="warn" href="#/explain">${num(c.refusedLastHour)}</a>` : '0'
          }</td>
        </tr>`,
        )
        .join('');
      draw($('#clusters'), data.clusters.length
        ? `<table class="grid"><thead><tr><th>Cluster</th><th>Status</th><th>Instances</th><th>GPUs</th>
            <th>GPU memory allocated / total</th><th>Pending</th><th>Running</th><th>Stopped</th>
            <th>Refused (last hour)</th></tr></thead><tbody>${rows}</tbody></table>${fragmentationPanel(data.clusters)}`
        : '<p class="muted">No clusters yet.</p>');
    },
  };
}

// ---- container instances -------------------------------------------------------------------------------------

const PAGE_SIZE = 50;

// usedMiB: a GPU memory figure of the console's reads (gpuMemoryUsedBytes) in MiB, "1,234 MiB"; readAgo: the
// age of its reading (gpuMemoryReadAgoMs), "read 3 s ago". A missing figure is written "not reported", never 0.
function usedMiB(bytes) {
  return `${(Math.round((10 * bytes) / 1048576) / 10).toLocaleString('en-US')} MiB`;
}
function readAgo(ms) {
  return `read ${Math.round((ms ?? 0) / 1000)} s ago`;
}

function gpuStrip(g, taskArnPrefix) {
  const segments = g.holders
    .map((h) => {
      const arn = taskArnPrefix + h.task;
      const width = g.total > 0 ? Math.max(0.5, (100 * h.mib) / g.total) : 0;
      const label = width >= 4 ? `${shortId(h.task)} · ${mib(h.mib)} · ${h.compute}%` : '';
      // The memory in use, drawn darker inside the task's declared block (full when it uses all or more).
      const reported = h.gpuMemoryUsedBytes !== undefined;
      const usedPct = reported && h.mib > 0 ? Math.min(100, (100 * h.gpuMemoryUsedBytes) / (h.mib * 1048576)) : 0;
      const used = reported ? `<span class="used${usedPct >= 100 ? ' full' : ''}" data-width="${usedPct.toFixed(2)}"></span>` : '';
      // The time it was read, not an age: a strip stays drawn while nothing changes, and an age would go stale.
      const inUse = reported ? `${usedMiB(h.gpuMemoryUsedBytes)} (read ${when(h.gpuMemoryReadAt)})` : 'not reported';
      const title = `task ${h.task} (${h.definition}, ${h.status}): ${mib(h.mib)} declared, compute ceiling ${h.compute}%; in use: ${inUse}`;
      return `<a class="seg${h.dedicated ? ' dedicated' : ''}" data-width="${width.toFixed(2)}" data-task="${esc(h.task)}"
        data-used-bytes="${reported ? h.gpuMemoryUsedBytes : 'none'}" href="#/task/${encodeURIComponent(arn)}"
        title="${esc(title)}">${used}<span class="label">${esc(label)}</span></a>`;
    })
    .join('');
  return `<div class="gpu" data-gpu="${esc(g.id)}" data-mode="${esc(g.mode)}" data-total="${g.total}"
      data-remaining="${g.remaining}" data-held="${g.held}">
    <div class="gpu-head"><span class="mono" title="${esc(g.id)}">${esc(shortGpu(g.id))}</span>
      <span class="badge mode-${esc(g.mode)}">${esc(g.mode)}</span>${g.held ? '<span class="badge held">HELD after fault</span>' : ''}
      <span class="muted">${mib(g.total - g.remaining)} / ${mib(g.total)} · <span title="the sum of the compute ceilings (maxComputePercent) of the tasks on this GPU; over 100% they may together ask for more SMs than it has and share them (compute-aware placement is off unless the cluster turns it on)">compute declared ${g.compute}%</span></span></div>
    <div class="strip">${segments}</div></div>`;
}

function instanceCard(i, taskArnPrefix) {
  return `<section class="card instance" data-instance="${esc(i.id)}" data-arn="${esc(i.arn)}">
    <h2><span class="mono">${esc(i.id)}</span> <span class="muted">${esc(i.ec2InstanceId)}</span></h2>
    <p class="facts">
      <span class="badge status-${esc(i.status)}">${esc(i.status)}</span>
      <span class="badge ${i.agentConnected ? 'ok' : 'bad'}" data-field="agent">${i.agentConnected ? 'agent connected' : 'agent DISCONNECTED'}</span>
      <span class="badge ${i.health === 'OK' ? 'ok' : 'bad'}" data-field="health">health ${esc(i.health)}</span>
      <span>${num(i.running)} running · ${num(i.pending)} pending</span>
      <span class="muted">CPU ${num(i.cpu.remaining)} / ${num(i.cpu.registered)} free · memory ${mib(i.memory.remaining)} / ${mib(i.memory.registered)} free</span>
      ${i.statusReason ? `<span class="warn">${esc(i.statusReason)}</span>` : ''}
    </p>
    ${i.gpus.map((g) => gpuStrip(g, taskArnPrefix)).join('') || '<p class="muted">no GPUs</p>'}
  </section>`;
}

async function clusterNames() {
  const data = await read('/console/api/overview', {}, true);
  return data.clusters.map((c) => c.name);
}

function clusterSelect(id, names, selected, withAll) {
  const options = (withAll ? ['<option value="">all clusters</option>'] : []).concat(
    names.map((n) => `<option value="${esc(n)}"${n === selected ? ' selected' : ''}>${esc(n)}</option>`),
  );
  return `<select id="${id}">${options.join('')}</select>`;
}

function instancesPage(params) {
  const page = Math.max(1, Number(params.page) || 1);
  let cluster = params.cluster;
  $('#main').innerHTML = '<h1>Container instances</h1><form id="inst-filter" class="filters"></form><div id="instances"></div>';
  let formDrawn = false;
  return {
    async load(force) {
      const args = () => ({ cluster, q: params.q, offset: (page - 1) * PAGE_SIZE, limit: PAGE_SIZE });
      let data;
      if (!formDrawn) {
        // The cluster list and (when the cluster is named) its instances are fetched at once.
        const [names, early] = await Promise.all([clusterNames(), cluster ? read('/console/api/instances', args(), true) : null]);
        cluster = cluster || names[0] || 'default';
        $('#inst-filter').innerHTML = `${clusterSelect('inst-cluster', names, cluster, false)}
          <input id="inst-q" placeholder="instance, EC2 or GPU id" value="${esc(params.q ?? '')}">
          <button type="submit">Show</button>`;
        $('#inst-filter').onsubmit = (ev) => {
          ev.preventDefault();
          setHash('instances', { cluster: $('#inst-cluster').value, q: $('#inst-q').value });
        };
        $('#inst-cluster').onchange = () => setHash('instances', { cluster: $('#inst-cluster').value });
        formDrawn = true;
        data = early ?? (await read('/console/api/instances', args(), true));
      } else {
        data = await read('/console/api/instances', args(), force);
      }
      if (!data) return;
      const pages = Math.max(1, Math.ceil(data.total / PAGE_SIZE));
      const link = (p, text) => `<a href="#/instances${esc(qs({ cluster, q: params.q, page: p }))}">${text}</a>`;
      const pager =
        pages > 1
          ? `<p class="pager">${page > 1 ? link(page - 1, '← previous') : ''} page ${page} of ${pages}
             (${num(data.total)} instances) ${page < pages ? link(page + 1, 'next →') : ''}</p>`
          : `<p class="muted">${num(data.total)} instance(s)</p>`;
      draw($('#instances'), pager + data.instances.map((i) => instanceCard(i, data.taskArnPrefix)).join(''));
    },
  };
}

// ---- tasks ---------------------------------------------------------------------------------------------------

function taskRow(t) {
  const gpus = t.gpus.map((g) => `${shortGpu(g.id)}${g.dedicated ? ' (whole)' : ` ${mib(g.mib)} ${g.compute}%`}`).join(', ');
  return `<tr data-task="${esc(t.id)}">
    <td><a class="mono" href="#/task/${encodeURIComponent(t.arn)}">${esc(shortId(t.id))}</a></td>
    <td>${esc(t.cluster)}</td><td>${esc(t.definition)}</td>
    <td><span class="badge status-${esc(t.lastStatus)}">${esc(t.lastStatus)}</span>
      ${t.desiredStatus !== t.lastStatus ? `<span class="muted">→ ${esc(t.desiredStatus)}</span>` : ''}</td>
    <td class="mono">${esc(shortId(t.instance))}</td><td class="mono">${esc(gpus)}</td>
    <td>${esc(t.startedBy)}</td><td>${esc(when(t.createdAt))}</td>
    <td>${t.stopCode ? `<span class="badge">${esc(t.stopCode)}</span> ` : ''}${esc(t.stoppedReason)}</td>
  </tr>`;
}

// tasksTable: tasks of a console read (/console/api/tasks), one taskRow each; nothing when there are none.
function tasksTable(tasks) {
  return tasks.length
    ? `<table class="grid"><thead><tr><th>Task</th><th>Cluster</th><th>Definition</th><th>Status</th><th>Instance</th>
        <th>GPUs</th><th>Started by</th><th>Created</th><th>Stop code and reason</th></tr></thead>
        <tbody>${tasks.map(taskRow).join('')}</tbody></table>`
    : '';
}

function tasksPage(params) {
  $('#main').innerHTML = '<h1>Tasks</h1><form id="task-filter" class="filters"></form><div id="tasks"></div>';
  let formKey = '';
  return {
    async load(force) {
      const data = await read(
        '/console/api/tasks',
        { cluster: params.cluster, status: params.status, family: params.family, startedBy: params.startedBy },
        force,
      );
      if (!data) return;
      const key = JSON.stringify([data.clusters, data.families]);
      if (key !== formKey) {
        formKey = key;
        const statuses = ['', 'PENDING', 'RUNNING', 'STOPPED']
          .map((s) => `<option value="${s}"${s === (params.status ?? '') ? ' selected' : ''}>${s || 'any status'}</option>`)
          .join('');
        const families = ['<option value="">any family</option>']
          .concat(data.families.map((f) => `<option${f === params.family ? ' selected' : ''}>${esc(f)}</option>`))
          .join('');
        $('#task-filter').innerHTML = `${clusterSelect('task-cluster', data.clusters, params.cluster, true)}
          <select id="task-status">${statuses}</select><select id="task-family">${families}</select>
          <input id="task-started-by" placeholder="started by" value="${esc(params.startedBy ?? '')}">
          <button type="submit">Filter</button>`;
        $('#task-filter').onsubmit = (ev) => {
          ev.preventDefault();
          setHash('tasks', {
            cluster: $('#task-cluster').value,
            status: $('#task-status').value,
            family: $('#task-family').value,
            startedBy: $('#task-started-by').value,
          });
        };
      }
      $('#tasks').innerHTML = `<p class="muted" id="task-count" data-total="${data.total}">${
        data.total > data.tasks.length ? `newest ${num(data.tasks.length)} of ` : ''
      }${num(data.total)} task(s)</p>
        ${tasksTable(data.tasks)}`;
    },
  };
}

// ---- one task ------------------------------------------------------------------------------------------------

// logStreams: where each container's output is read (the logs API's naming): awslogs with a group (and an
// optional stream prefix), else /gpupack/<cluster>.
function logStreams(task, definition) {
  const taskId = lastSegment(task.taskArn);
  const cluster = lastSegment(task.clusterArn);
  return (definition?.containerDefinitions ?? []).map((c) => {
    const lc = c.logConfiguration;
    const group = lc?.logDriver === 'awslogs' && lc.options?.['awslogs-group'];
    if (group) {
      const prefix = lc.options['awslogs-stream-prefix'];
      return { container: c.name, group, stream: prefix ? `${prefix}/${c.name}/${taskId}` : `${c.name}/${taskId}` };
    }
    return { container: c.name, group: `/gpupack/${cluster}`, stream: `${c.name}/${taskId}` };
  });
}

async function readLog(s) {
  const r = await ecs(
    'GetLogEvents',
    { logGroupName: s.group, logStreamName: s.stream, startFromHead: false, limit: 1000 }, // the latest lines
    'Logs_20140328.GetLogEvents',
  );
  if (r.ok) return { events: r.json.events ?? [] };
  const type = errorType(r.json);
  if (type.includes('UnknownOperation') || type.includes('UnsupportedFeature')) return { none: 'this server keeps no logs' };
  if (type.includes('ResourceNotFound')) return { none: 'nothing written yet' };
  return { none: r.json.message ?? `error ${r.status}` };
}

function taskPage(params) {
  const arn = params.id;
  const cluster = String(arn).split('/').slice(-2, -1)[0] || 'default';
  $('#main').innerHTML = `<h1>Task <span class="mono">${esc(lastSegment(arn))}</span></h1>
    <div id="task"></div><h2>Log</h2><div id="log"></div>`;
  let definition = null;
  let lastLog = 0;
  return {
    async load(force) {
      const r = await ecs('DescribeTasks', { cluster, tasks: [arn] });
      if (!r.ok) throw new Error(r.json.message ?? `DescribeTasks answered ${r.status}`);
      const t = r.json.tasks?.[0];
      if (!t) {
        $('#task').innerHTML = `<p class="error">No such task (it may have expired): ${esc(arn)}</p>`;
        return;
      }
      const compact = (await read('/console/api/tasks', { arn }, true))?.tasks?.[0];
      const reservations = (compact?.gpus ?? [])
        .map((g) => {
          const held = !g.reserved ? 'not given to it' : g.dedicated ? 'whole GPU (DEDICATED)' : `${mib(g.mib)}, compute ceiling ${g.compute}%`;
          return `<li class="mono" data-gpu="${esc(g.id)}" data-used-bytes="${g.gpuMemoryUsedBytes ?? 'none'}">${esc(g.id)}: ${held}
            <span class="muted">· in use ${g.gpuMemoryUsedBytes === undefined ? 'not reported' : usedMiB(g.gpuMemoryUsedBytes)}</span></li>`;
        })
        .join('');
      // The task's GPU memory in use (its agent's last heartbeat) beside what it declared.
      const inUse =
        compact?.gpuMemoryUsedBytes === undefined
          ? '<span class="muted">not reported</span>'
          : `used ${usedMiB(compact.gpuMemoryUsedBytes)} of ${mib(compact.gpuMemoryDeclaredMib)} declared (${readAgo(compact.gpuMemoryReadAgoMs)})`;
      const containers = (t.containers ?? [])
        .map(
          (c) => `<tr><td>${esc(c.name)}</td><td>${imageCell(c.image, compact?.runtime)}</td><td>${esc(c.lastStatus)}</td>
          <td>${esc(c.exitCode ?? '')}</td><td>${esc(c.reason ?? '')}</td><td class="mono">${esc((c.gpuIds ?? []).join(', '))}</td></tr>`,
        )
        .join('');
      const canStop = app.me?.canWrite && t.desiredStatus !== 'STOPPED';
      $('#task').innerHTML = `<section class="card">
        <dl class="facts-grid">
          <dt>Status</dt><dd><span class="badge status-${esc(t.lastStatus)}" id="task-last-status">${esc(t.lastStatus)}</span>
            <span class="muted">desired ${esc(t.desiredStatus)}</span></dd>
          <dt>Definition</dt><dd>${esc(lastSegment(t.taskDefinitionArn))}</dd>
          <dt>Cluster</dt><dd>${esc(lastSegment(t.clusterArn))}</dd>
          <dt>Placed on</dt><dd>${t.containerInstanceArn ? `<a class="mono" href="#/instances${esc(qs({ cluster, q: lastSegment(t.containerInstanceArn) }))}">${esc(lastSegment(t.containerInstanceArn))}</a>` : '<span class="muted">not placed</span>'}</dd>
          <dt>GPUs</dt><dd><ul class="plain">${reservations || '<li class="muted">none held</li>'}</ul></dd>
          <dt>GPU memory in use</dt><dd id="task-gpu-used" data-used-bytes="${compact?.gpuMemoryUsedBytes ?? 'none'}"
            data-read-at="${compact?.gpuMemoryReadAt ?? ''}">${inUse}</dd>
          <dt>Started by</dt><dd>${esc(t.startedBy ?? '')}</dd>
          <dt>Group</dt><dd>${esc(t.group ?? '')}</dd>
          <dt>Created</dt><dd>${esc(whenSeconds(t.createdAt))}</dd>
          <dt>Started</dt><dd>${esc(whenSeconds(t.startedAt))}</dd>
          <dt>Stopped</dt><dd>${esc(whenSeconds(t.stoppedAt))}</dd>
          <dt>Stop code</dt><dd id="task-stop-code">${esc(t.stopCode ?? '')}</dd>
          <dt>Stop reason</dt><dd id="task-stop-reason">${esc(t.stoppedReason ?? '')}</dd>
        </dl>
        ${canStop ? '<button id="stop-task" type="button" class="danger">Stop task</button>' : ''}
        <table class="grid"><thead><tr><th>Container</th><th>Image</th><th>Status</th><th>Exit</th><th>Reason</th>
          <th>GPUs</th></tr></thead><tbody>${containers}</tbody></table></section>`;
      if (canStop) {
        $('#stop-task').onclick = async () => {
          const s = await ecs('StopTask', { cluster, task: arn, reason: `stopped from the console by ${app.me.accessKeyId ?? 'a user'}` });
          setStatus(s.ok ? 'stop requested' : `StopTask refused: ${s.json.message ?? s.status}`);
          tick(true);
        };
      }
      // The log: at most every 2 s.
      if (!force && Date.now() - lastLog < 2000) return;
      lastLog = Date.now();
      if (!definition) {
        const d = await ecs('DescribeTaskDefinition', { taskDefinition: t.taskDefinitionArn });
        definition = d.ok ? d.json.taskDefinition : { containerDefinitions: (t.containers ?? []).map((c) => ({ name: c.name })) };
      }
      const parts = [];
      for (const s of logStreams(t, definition)) {
        const log = await readLog(s);
        parts.push(`<h3>${esc(s.container)} <span class="muted mono">${esc(s.group)} ${esc(s.stream)}</span></h3>${
          log.none !== undefined
            ? `<p class="nolog">no log <span class="muted">(${esc(log.none)})</span></p>`
            : log.events.length
              ? `<pre class="log">${log.events.map((e) => `${esc(when(e.timestamp))}  ${esc(e.message)}`).join('\n')}</pre>`
              : '<p class="nolog">no log lines yet</p>'
        }`);
      }
      $('#log').innerHTML = parts.join('');
    },
  };
}

// ---- why not placed ------------------------------------------------------------------------------------------

const EXPLAIN_ROWS = 100;

// explanation draws ExplainPlacement's answer: the chosen instance first, then the eligible ones, then the rest
// (at most EXPLAIN_ROWS of them unless `all`: a cluster of 1,000 instances of 8 GPUs is 8,000 verdicts).
function explanation(result, all = false) {
  const d = result.demand;
  const chosen = result.instances.find((i) => i.chosen);
  const rank = (i) => (i.chosen ? 0 : i.eligible ? 1 : 2);
  const ordered = result.instances.map((i, n) => [i, n]).sort((a, b) => rank(a[0]) - rank(b[0]) || a[1] - b[1]).map(([i]) => i);
  const shown = all ? ordered : ordered.slice(0, EXPLAIN_ROWS);
  const more = ordered.length - shown.length;
  const rows = shown
    .map((i) => {
      const gpus = i.gpus
        .map((g) => `<li class="${g.fits ? 'fits' : 'nofit'}" data-gpu="${esc(g.gpuId)}"><span class="mono">${esc(shortGpu(g.gpuId))}</span>
          ${g.fits ? '✓' : '✗'} ${esc(g.detail)}</li>`)
        .join('');
      const verdict = i.chosen ? '<span class="badge ok">chosen</span>' : i.eligible ? '<span class="badge">eligible</span>' : '<span class="badge bad">not eligible</span>';
      const why = i.eligible
        ? (i.scores ?? []).map((s) => esc(s.text)).join('; ')
        : `<b>${esc(i.reason)}</b> ${esc(i.detail)}`;
      return `<tr data-instance="${esc(lastSegment(i.containerInstanceArn))}"><td class="mono">${esc(shortId(lastSegment(i.containerInstanceArn)))}</td>
        <td>${verdict}</td><td class="why">${why}</td><td><ul class="plain">${gpus}</ul></td></tr>`;
    })
    .join('');
  return `<section class="card" id="explanation">
    <p>Demand: CPU ${num(d.cpu)}, memory ${mib(d.memory)}, GPU ${esc(d.gpuKind)}${
      d.gpuKind === 'NVIDIA_MPS' ? ` ${mib(d.gpuMemoryInMiB)} at ${d.gpuComputePercent}% compute` : d.gpuKind === 'DEDICATED' ? ` × ${d.gpuCount}` : ''
    }</p>
    <p id="explain-verdict" class="${chosen ? 'ok' : 'error'}">${
      chosen ? `Would be placed on ${esc(lastSegment(chosen.containerInstanceArn))}.` : 'Fits nowhere: see each instance and GPU below.'
    }</p>
    ${result.instances.length ? `<table class="grid"><thead><tr><th>Instance</th><th>Verdict</th><th>Why</th><th>GPUs</th></tr></thead>
      <tbody>${rows}</tbody></table>` : '<p class="muted">The cluster has no instances.</p>'}
    ${more > 0 ? `<button id="explain-all" type="button">Show the other ${num(more)} instance(s)</button>` : ''}</section>`;
}

function explainPage(params) {
  $('#main').innerHTML = `<h1>Why not placed</h1>
    <form id="explain-form" class="card">
      <label>Cluster <span id="explain-cluster-slot"></span></label>
      <label>Task definition <input id="explain-td" list="explain-families" required value="${esc(params.taskDefinition ?? '')}"
        placeholder="family, family:revision or ARN"><datalist id="explain-families"></datalist></label>
      <label>Overrides (JSON, optional) <textarea id="explain-overrides" rows="3" placeholder='{"containerOverrides": []}'>${esc(params.overrides ?? '')}</textarea></label>
      <button type="submit">Explain</button>
    </form>
    <div id="explain-result"></div>
    <h2>Latest refusals</h2><div id="refusals"></div>`;
  let formDrawn = false;
  const run = async () => {
    let overrides;
    const text = $('#explain-overrides').value.trim();
    if (text) {
      try {
        overrides = JSON.parse(text);
      } catch (e) {
        $('#explain-result').innerHTML = `<p class="error">The overrides are not JSON: ${esc(e.message)}</p>`;
        return;
      }
    }
    const body = { cluster: $('#explain-cluster').value, taskDefinition: $('#explain-td').value };
    if (overrides) body.overrides = overrides;
    const r = await ecs('ExplainPlacement', body);
    $('#explain-result').innerHTML = r.ok ? explanation(r.json) : `<p class="error">${esc(errorType(r.json))}: ${esc(r.json.message ?? r.status)}</p>`;
    const showAll = $('#explain-all');
    if (showAll) showAll.onclick = () => ($('#explain-result').innerHTML = explanation(r.json, true));
  };
  return {
    async load(force) {
      if (!formDrawn) {
        const tasks = await read('/console/api/tasks', { limit: 0 }, true);
        $('#explain-cluster-slot').innerHTML = clusterSelect('explain-cluster', tasks.clusters, params.cluster, false);
        $('#explain-families').innerHTML = tasks.families.map((f) => `<option value="${esc(f)}">`).join('');
        $('#explain-form').onsubmit = (ev) => {
          ev.preventDefault();
          setHash('explain', {
            cluster: $('#explain-cluster').value,
            taskDefinition: $('#explain-td').value,
            overrides: $('#explain-overrides').value.trim(),
          });
        };
        formDrawn = true;
        if (params.taskDefinition) await run();
      }
      const data = await read('/console/api/refusals', {}, force);
      if (!data) return;
      $('#refusals').innerHTML = data.refusals.length
        ? `<table class="grid"><thead><tr><th>When</th><th>Cluster</th><th>Task definition</th><th>Tasks</th><th>Reasons</th><th></th></tr></thead><tbody>${data.refusals
            .map(
              (r, n) => `<tr class="refusal"><td>${esc(when(r.at))}</td><td>${esc(r.cluster)}</td><td>${esc(r.taskDefinition)}</td>
              <td>${num(r.tasks)}</td><td><ul class="plain">${r.failures
                .map((f) => `<li><b>${esc(f.reason)}</b> <span class="mono">${esc(shortId(lastSegment(f.arn)))}</span> ${esc(f.detail ?? '')}</li>`)
                .join('')}</ul></td>
              <td><a class="explain-again" data-n="${n}" href="#/explain${esc(qs({ cluster: r.cluster, taskDefinition: r.taskDefinition, overrides: r.overrides }))}">explain now</a></td></tr>`,
            )
            .join('')}</tbody></table>`
        : '<p class="muted">No RunTask or StartTask has been refused since the server started.</p>';
    },
  };
}

// ---- start ---------------------------------------------------------------------------------------------------

window.addEventListener('hashchange', () => route());
window.addEventListener('DOMContentLoaded', async () => {
  try {
    await loadMe();
  } catch (e) {
    setStatus(`error: ${e.message}`);
  }
  route();
});
