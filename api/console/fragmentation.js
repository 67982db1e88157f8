// gpupack's web console: the fragmentation panel of the clusters page, on app.js's helpers (esc, num, mib, bar).
// Loaded after app.js, whose clustersPage calls fragmentationPanel with /console/api/overview's clusters.
//
// Per cluster, and per instance type inside it: the largest free block of GPU memory on one GPU, the free GPU
// memory, and the stranded part of it (free pieces too small for every task shape the cluster saw in the last
// hour), as the server's /metrics serves them (docs/operations.md "Fragmentation").
//
// As in app.js, everything the server answers goes into the page only through esc().
'use strict';

// fragmentationRow: one row of figures (f: {largestFreeBlockMib, freeMib, strandedMib, gpus}).
function fragmentationRow(cluster, type, f, cls) {
  return `<tr class="${cls}" data-fragmentation="${esc(cluster)}" data-instance-type="${esc(type ?? '')}"
      data-largest="${f.largestFreeBlockMib}" data-free="${f.freeMib}" data-stranded="${f.strandedMib}">
    <td>${type === undefined ? `<a href="#/instances${esc(qs({ cluster }))}">${esc(cluster)}</a>` : `<span class="muted">type</span> ${esc(type || '(none)')}`}</td>
    <td>${num(f.gpus)}</td>
    <td>${mib(f.largestFreeBlockMib)}</td>
    <td>${mib(f.freeMib)}</td>
    <td${f.strandedMib > 0 ? ' class="warn"' : ''}>${bar(f.strandedMib, f.freeMib)} ${mib(f.strandedMib)}</td>
  </tr>`;
}

// fragmentationPanel: the panel under the clusters table (empty when no cluster has a GPU that takes tasks).
function fragmentationPanel(clusters) {
  const rows = clusters
    .filter((c) => c.fragmentation && c.fragmentation.gpus > 0)
    .map((c) => {
      const f = c.fragmentation;
      const judged = f.smallestRecentDemandMib === null
        ? (f.recentDedicated ? 'dedicated tasks only' : 'no GPU task in the last hour: nothing judged stranded')
        : `smallest task of the last hour ${mib(f.smallestRecentDemandMib)}${f.recentDedicated ? ', and dedicated tasks' : ''}`;
      const types = f.byInstanceType.length > 1
        ? f.byInstanceType.map((t) => fragmentationRow(c.name, t.instanceType, t, 'sub')).join('')
        : '';
      return fragmentationRow(c.name, undefined, f, '') + `<tr class="sub"><td colspan="5" class="muted">${judged}</td></tr>` + types;
    })
    .join('');
  if (!rows) return '';
  return `<section id="fragmentation"><h2>GPU memory fragmentation</h2>
    <p class="muted">Free: GPU memory no task declared, on ACTIVE instances. The largest block is the largest shared
    task that fits now; stranded is free memory in pieces smaller than every task shape of the last hour.</p>
    <table class="grid"><thead><tr><th>Cluster</th><th>GPUs</th><th>Largest free block</th><th>Free</th>
    <th>Stranded</th></tr></thead><tbody>${rows}</tbody></table></section>`;
}
