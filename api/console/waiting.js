// gpupack's web console: the Waiting page, on app.js's helpers (esc, num, mib, read, draw, when, clusterSelect, ...).
// Loaded after app.js, which routes to it.
//
// #/waiting?cluster=   the tasks waiting in PROVISIONING for a capacity provider (the console read
//                      /console/api/waiting, polled with `since`): one table per (cluster, provider) line, its tasks
//                      in line order (priority, then arrival) with their team, GPU memory, how long they have
//                      waited and why each waits (over a quota, no room for the head, the instance held for it,
//                      behind the head). docs/api.md, "The order of the line", is the rule.
//
// As in app.js, everything the server answers goes into the page only through esc().
'use strict';

function waitedFor(sinceMs) {
  const s = Math.max(0, Math.round((Date.now() - sinceMs) / 1000));
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  return `${(s / 3600).toFixed(1)} h`;
}

function waitingLineTable(line) {
  const rows = line.tasks
    .map(
      (t) => `<tr data-task="${esc(t.id)}" data-position="${t.position}">
        <td>${num(t.position)}</td><td><a href="#/task/${encodeURIComponent(t.arn)}" class="mono">${esc(t.id.slice(0, 12))}</a></td>
        <td>${esc(t.taskDefinition)}</td><td>${num(t.priority)}</td><td>${esc(t.team || '—')}</td>
        <td>${t.gpuMemory ? esc(mib(t.gpuMemory)) : '—'}</td>
        <td title="${esc(when(t.waitingSince))}">${esc(waitedFor(t.waitingSince))}</td>
        <td class="why" data-field="why">${esc(t.why)}</td></tr>`,
    )
    .join('');
  const more = line.length > line.tasks.length ? `<p class="muted">and ${num(line.length - line.tasks.length)} more</p>` : '';
  return `<section class="waiting-line" data-cluster="${esc(line.cluster)}" data-provider="${esc(line.provider)}">
    <h2>${esc(line.provider)} <span class="muted">in ${esc(line.cluster)}: ${num(line.length)} waiting;
    its running tasks hold ${esc(mib(line.gpuMemoryHeld))} of GPU memory${
      line.heldInstance ? `; instance ${esc(line.heldInstance)} is held for the head` : ''
    }</span></h2>
    <table class="grid"><thead><tr><th>#</th><th>Task</th><th>Task definition</th><th>Priority</th><th>Team</th>
    <th>GPU memory</th><th>Waiting</th><th>Why it waits</th></tr></thead><tbody>${rows}</tbody></table>${more}</section>`;
}

function waitingPage(params) {
  $('#main').innerHTML = '<h1>Waiting for capacity</h1><form id="wait-filter" class="filters"></form><div id="waiting"></div>';
  let formKey = '';
  return {
    async load(force) {
      const data = await read('/console/api/waiting', { cluster: params.cluster }, force);
      if (!data) return;
      const key = JSON.stringify(data.clusters);
      if (key !== formKey) {
        formKey = key;
        $('#wait-filter').innerHTML = `${clusterSelect('wait-cluster', data.clusters, params.cluster, true)}`;
        $('#wait-cluster').onchange = () => setHash('waiting', { cluster: $('#wait-cluster').value });
      }
      draw($('#waiting'), data.lines.length
        ? data.lines.map(waitingLineTable).join('')
        : '<p class="muted" id="waiting-none">No task waits for a capacity provider (RunTask through a provider that has room places at once).</p>');
    },
  };
}

PAGES.waiting = waitingPage;
