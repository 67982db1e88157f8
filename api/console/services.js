// gpupack's web console: the services pages, on app.js's helpers (esc, num, read, ecs, draw, taskRow, ...).
// Loaded after app.js, which routes to them.
//
// #/services?cluster=   the services not INACTIVE (the console read /console/api/services, polled with `since`):
//                       desired / running / pending, scheduling strategy, task definition, the PRIMARY
//                       deployment's rolloutState and the latest event.
// #/service/<ARN>       one service from DescribeServices: its deployments, its latest events (newest first),
//                       and its tasks not STOPPED with the GPUs they hold (/console/api/tasks?group=service:<name>).
//
// As in app.js, everything the server answers goes into the page only through esc().
'use strict';

const SERVICE_EVENTS_SHOWN = 20;

// rolloutBadge: a deployment's rolloutState, its reason on hover.
function rolloutBadge(state, reason) {
  if (!state) return '';
  return `<span class="badge rollout-${esc(state)}" title="${esc(reason ?? '')}">${esc(state)}</span>`;
}

function serviceStatusBadge(status) {
  return `<span class="badge service-${esc(status)}">${esc(status)}</span>`;
}

// replicaCells: the desired, running and pending counts, each a cell the tests read through data-field.
function replicaCells(desired, running, pending) {
  const cell = (field, n, warn) => `<td data-field="${field}" data-value="${n}"${warn ? ' class="warn"' : ''}>${num(n)}</td>`;
  return cell('desired', desired) + cell('running', running, running < desired) + cell('pending', pending);
}

function servicesPage(params) {
  $('#main').innerHTML = '<h1>Services</h1><form id="svc-filter" class="filters"></form><div id="services"></div>';
  let formKey = '';
  return {
    async load(force) {
      const data = await read('/console/api/services', { cluster: params.cluster }, force);
      if (!data) return;
      const key = JSON.stringify(data.clusters);
      if (key !== formKey) {
        formKey = key;
        $('#svc-filter').innerHTML = `${clusterSelect('svc-cluster', data.clusters, params.cluster, true)}`;
        $('#svc-cluster').onchange = () => setHash('services', { cluster: $('#svc-cluster').value });
      }
      const rows = data.services
        .map(
          (s) => `<tr data-service="${esc(s.name)}" data-cluster="${esc(s.cluster)}">
          <td><a href="#/service/${encodeURIComponent(s.arn)}">${esc(s.name)}</a></td>
          <td>${esc(s.cluster)}</td><td>${serviceStatusBadge(s.status)}</td>
          ${replicaCells(s.desired, s.running, s.pending)}
          <td>${esc(s.schedulingStrategy)}</td><td data-field="taskDefinition">${esc(s.taskDefinition)}</td>
          <td data-field="rollout">${rolloutBadge(s.rolloutState, s.rolloutStateReason)}${
            s.deployments > 1 ? ` <span class="muted">${num(s.deployments)} deployments</span>` : ''
          }</td>
          <td class="why">${s.latestEvent ? `<span class="muted">${esc(when(s.latestEvent.at))}</span> ${esc(s.latestEvent.message)}` : ''}</td>
        </tr>`,
        )
        .join('');
      draw($('#services'), data.services.length
        ? `<p class="muted" id="service-count">${num(data.services.length)} service(s)</p>
          <table class="grid"><thead><tr><th>Service</th><th>Cluster</th><th>Status</th><th>Desired</th><th>Running</th>
          <th>Pending</th><th>Strategy</th><th>Task definition</th><th>Rollout (PRIMARY)</th><th>Latest event</th></tr></thead>
          <tbody>${rows}</tbody></table>`
        : '<p class="muted" id="service-count">No services (CreateService starts one).</p>');
    },
  };
}

// deploymentsTable: PRIMARY first, then the ACTIVE ones being replaced; each links to its tasks (the tasks page
// filtered by startedBy, the deployment's id).
function deploymentsTable(cluster, deployments) {
  const rows = deployments
    .map(
      (d) => `<tr data-deployment="${esc(d.id)}" data-status="${esc(d.status)}">
      <td class="mono nowrap">${esc(d.id)}</td><td>${esc(d.status)}</td><td>${esc(lastSegment(d.taskDefinition))}</td>
      ${replicaCells(d.desiredCount, d.runningCount, d.pendingCount)}
      <td data-field="failed" data-value="${d.failedTasks}">${num(d.failedTasks)}</td>
      <td data-field="rollout">${rolloutBadge(d.rolloutState)} <span class="muted">${esc(d.rolloutStateReason ?? '')}</span></td>
      <td>${esc(whenSeconds(d.createdAt))}</td><td>${esc(whenSeconds(d.updatedAt))}</td>
      <td><a href="#/tasks${esc(qs({ cluster, startedBy: d.id }))}">tasks</a></td></tr>`,
    )
    .join('');
  return `<table class="grid"><thead><tr><th>Deployment</th><th>Status</th><th>Task definition</th><th>Desired</th>
    <th>Running</th><th>Pending</th><th>Failed</th><th>Rollout</th><th>Created</th><th>Updated</th><th></th></tr></thead>
    <tbody>${rows}</tbody></table>`;
}

function eventsList(events, all) {
  const shown = all ? events : events.slice(0, SERVICE_EVENTS_SHOWN);
  const more = events.length - shown.length;
  return `${shown.length ? `<table class="grid"><tbody>${shown
    .map((e) => `<tr class="event"><td class="muted">${esc(whenSeconds(e.createdAt))}</td><td>${esc(e.message)}</td></tr>`)
    .join('')}</tbody></table>` : '<p class="muted">No events yet.</p>'}
    ${more > 0 ? `<button id="all-events" type="button">Show the other ${num(more)} event(s)</button>` : ''}`;
}

function servicePage(params) {
  const arn = params.id;
  const parts = String(arn).split('/');
  const cluster = parts.slice(-2, -1)[0] || 'default';
  const name = parts[parts.length - 1];
  $('#main').innerHTML = `<h1>Service <span class="mono">${esc(name)}</span></h1><div id="service"></div>
    <h2 class="section">Deployments</h2><div id="deployments"></div>
    <h2 class="section">Tasks</h2><div id="service-tasks"></div>
    <h2 class="section">Events <span class="muted">(newest first)</span></h2><div id="events"></div>`;
  let tasks = null; // the last tasks read drawn (a read answers null while unchanged)
  let allEvents = false;
  let drawn = '';
  const load = async (force) => {
    const [r, t] = await Promise.all([
      ecs('DescribeServices', { cluster, services: [arn] }),
      read('/console/api/tasks', { cluster, group: `service:${name}`, live: 1 }, force),
    ]);
    if (!r.ok) throw new Error(r.json.message ?? `DescribeServices answered ${r.status}`);
    if (t) tasks = t;
    const s = r.json.services?.[0];
    if (!s) {
      $('#service').innerHTML = `<p class="error">No such service: ${esc(arn)}</p>`;
      return;
    }
    // Redrawn only when something changed: a poll that finds the same service leaves the page (and a selection) be.
    const key = JSON.stringify([s, tasks?.version, allEvents]);
    if (key === drawn) return;
    drawn = key;
    const cfg = s.deploymentConfiguration ?? {};
    const breaker = cfg.deploymentCircuitBreaker ?? {};
    $('#service').innerHTML = `<section class="card"><dl class="facts-grid" id="service-facts"
        data-desired="${s.desiredCount}" data-running="${s.runningCount}" data-pending="${s.pendingCount}">
      <dt>Status</dt><dd id="service-status">${serviceStatusBadge(s.status)}</dd>
      <dt>Cluster</dt><dd>${esc(lastSegment(s.clusterArn))}</dd>
      <dt>Tasks</dt><dd id="service-replicas">${num(s.runningCount)} running · ${num(s.pendingCount)} pending · ${num(s.desiredCount)} desired</dd>
      <dt>Strategy</dt><dd>${esc(s.schedulingStrategy)}</dd>
      <dt>Task definition</dt><dd>${esc(lastSegment(s.taskDefinition))}</dd>
      <dt>Deployments</dt><dd>minimum healthy ${num(cfg.minimumHealthyPercent)}% · maximum ${num(cfg.maximumPercent)}% · circuit breaker
        ${breaker.enable ? `on${breaker.rollback ? ', with rollback' : ''}` : 'off'}</dd>
      <dt>Created</dt><dd>${esc(whenSeconds(s.createdAt))}</dd>
    </dl></section>`;
    $('#deployments').innerHTML = deploymentsTable(cluster, s.deployments ?? []);
    draw($('#service-tasks'), tasks
      ? `<p class="muted" id="service-task-count" data-total="${tasks.total}">${
          tasks.total > tasks.tasks.length ? `newest ${num(tasks.tasks.length)} of ` : ''
        }${num(tasks.total)} task(s) not STOPPED; a deployment's "tasks" lists all of its own.</p>${tasksTable(tasks.tasks)}`
      : '');
    $('#events').innerHTML = eventsList(s.events ?? [], allEvents);
    const more = $('#all-events');
    if (more) {
      more.onclick = () => {
        allEvents = true;
        tick(true);
      };
    }
  };
  return { load };
}

PAGES.services = servicesPage;
PAGES.service = servicePage;
