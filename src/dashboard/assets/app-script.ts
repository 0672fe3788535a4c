/**
 * The dashboard's browser script, served as `/app.js`. It renders the `RunView` objects the
 * server pushes over server-sent events and the chart layouts from `/api/charts`; all the meaning
 * of events is worked out on the server (`run-view.ts`). Every piece of run data enters the DOM
 * through `textContent` or as an attribute value of a fixed, harmless attribute: never through
 * `innerHTML`, so model text is shown, not interpreted. Written as plain ES2020 inside a string so
 * that it ships in `dist` with the server; its behaviour is covered by the browser tests.
 */
export const APP_SCRIPT = String.raw`'use strict';
(function () {
  var SVG = 'http://www.w3.org/2000/svg';
  var charts = null;
  var selected = '';
  var source = null;
  var lastView = null;
  var openDetails = new Set();

  function byId(id) { return document.getElementById(id); }

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }

  function svg(tag, attrs) {
    var node = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (k) { node.setAttribute(k, String(attrs[k])); });
    return node;
  }

  function svgText(x, y, text, cls) {
    var node = svg('text', { x: x, y: y });
    if (cls) node.setAttribute('class', cls);
    node.textContent = String(text);
    return node;
  }

  function num(n) { return n === null || n === undefined ? '—' : String(Math.round(n * 100) / 100); }
  function usd(n) { return '$' + n.toFixed(4); }
  function secs(ms) { return ms === null || ms === undefined ? '—' : (ms / 1000).toFixed(1) + ' s'; }
  function pill(text, cls) { return el('span', 'pill ' + (cls || text), text); }

  function facts(rows) {
    var dl = el('dl', 'facts');
    rows.forEach(function (row) {
      if (row[1] === null || row[1] === undefined) return;
      dl.append(el('dt', null, row[0]));
      var dd = el('dd');
      if (row[1] instanceof Node) dd.append(row[1]); else dd.textContent = String(row[1]);
      dl.append(dd);
    });
    return dl;
  }

  function list(items, cls) {
    var ul = el('ul', cls || 'plain');
    items.forEach(function (item) { ul.append(el('li', null, item)); });
    return ul;
  }

  function details(key, summary, body) {
    var d = el('details');
    d.dataset.key = key;
    d.open = openDetails.has(key);
    d.addEventListener('toggle', function () {
      if (d.open) openDetails.add(key); else openDetails.delete(key);
    });
    d.append(el('summary', null, summary), body);
    return d;
  }

  function table(headers, rows, numeric) {
    var t = el('table');
    var head = el('tr');
    headers.forEach(function (h, i) { head.append(el('th', numeric && numeric[i] ? 'num' : null, h)); });
    t.append(head);
    rows.forEach(function (row) {
      var tr = el('tr');
      row.forEach(function (cell, i) {
        var td = el('td', numeric && numeric[i] ? 'num' : null);
        if (cell instanceof Node) td.append(cell); else td.textContent = cell === null ? '—' : String(cell);
        tr.append(td);
      });
      t.append(tr);
    });
    return t;
  }

  // ---- statecharts -------------------------------------------------------------------------

  function drawChart(host, layout, active) {
    var root = svg('svg', {
      'class': 'statechart', width: layout.width, height: layout.height,
      viewBox: '0 0 ' + layout.width + ' ' + layout.height, role: 'img'
    });
    var markerId = host.id + '-arrow';
    var defs = svg('defs');
    var marker = svg('marker', {
      id: markerId, viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7,
      orient: 'auto-start-reverse'
    });
    marker.append(svg('path', { d: 'M0,0 L10,5 L0,10 z', 'class': 'arrowhead' }));
    defs.append(marker);
    root.append(defs);
    var activeBox = layout.boxes.find(function (b) { return b.id === active; });
    var onPath = new Set(activeBox ? activeBox.path : []);
    // Compound states first, then the arrows, then the leaves: an arrow passes under a leaf it
    // crosses but stays visible inside the compound state it belongs to.
    var isCompound = function (b) { return b.kind === 'compound' || b.kind === 'parallel'; };
    var ordered = layout.boxes.filter(isCompound).concat(['edges'], layout.boxes.filter(function (b) { return !isCompound(b); }));
    ordered.forEach(function (box) {
      if (box === 'edges') { drawEdges(root, layout, onPath, markerId); return; }
      var state = box.id === active ? ' active' : onPath.has(box.id) ? ' on-path' : '';
      var g = svg('g', { 'class': 'state ' + box.kind + state, 'data-state': box.id });
      var title = svg('title');
      title.textContent = box.id;
      g.append(title, svg('rect', { x: box.x, y: box.y, width: box.w, height: box.h, rx: 6 }));
      var compound = box.kind === 'compound' || box.kind === 'parallel';
      g.append(svgText(box.x + 8, box.y + (compound ? 14 : 20), box.label, 'label'));
      if (box.notes.length > 0) {
        g.append(svgText(box.x + 8, box.y + (compound ? 28 : 34), box.notes.join(', '), 'invoke'));
      }
      root.append(g);
    });
    host.replaceChildren(root);
  }

  function drawEdges(root, layout, onPath, markerId) {
    layout.edges.forEach(function (edge) {
      var from = onPath.has(edge.source) ? ' from-active' : '';
      var path = svg('path', { d: edge.d, 'class': 'edge' + from, 'marker-end': 'url(#' + markerId + ')' });
      var title = svg('title');
      title.textContent = edge.labels.join('\n') + '  (' + edge.source + ' → ' + edge.target + ')';
      path.append(title);
      root.append(path);
    });
  }

  function transitionsFrom(layout, active) {
    var box = layout.boxes.find(function (b) { return b.id === active; });
    if (!box) return [];
    return layout.edges.filter(function (e) { return box.path.indexOf(e.source) >= 0; })
      .map(function (e) { return e.labels.join(' | ') + ' → ' + e.target; });
  }

  function renderCharts(view) {
    if (!charts) return;
    drawChart(byId('run-chart'), charts.run, view.active.run);
    var step = view.active.stepNumber === null ? null
      : view.steps.filter(function (s) { return s.stepNumber === view.active.stepNumber; }).pop();
    byId('step-chart-title').textContent = step
      ? 'Step ' + step.stepNumber + ' statechart: ' + step.title : 'Step statechart (no step yet)';
    drawChart(byId('step-chart'), charts.step, view.active.step);
    var next = byId('next-transitions');
    var run = transitionsFrom(charts.run, view.active.run);
    var st = view.active.step ? transitionsFrom(charts.step, view.active.step) : [];
    next.replaceChildren(
      el('div', 'active-states', 'Active: ' + view.active.run + (view.active.step ? ' · ' + view.active.step : '')),
      el('div', null, run.length ? 'Run can go: ' + run.join('; ') : ''),
      el('div', null, st.length ? 'Step can go: ' + st.join('; ') : '')
    );
  }

  // ---- sections ----------------------------------------------------------------------------

  function renderOverview(view) {
    var status = pill(view.status);
    status.id = 'run-status';
    var t = view.totals;
    var section = byId('overview');
    section.replaceChildren(el('h2', null, 'Run'), facts([
      ['Task', view.task],
      ['Run id', view.runId],
      ['Status', status],
      ['Outcome', view.outcome ? view.outcome.summary : null],
      ['Stopped because', view.outcome && view.outcome.reason ? view.outcome.reason + ': ' + view.outcome.message : null],
      ['Started', view.startedAt],
      ['Duration', secs(view.durationMs)],
      ['Model calls', t.calls + ' (' + secs(t.latencyMs) + ' in calls)'],
      ['Tokens', (t.promptTokens + t.completionTokens) + ' (' + t.promptTokens + ' prompt, ' + t.completionTokens + ' completion)'],
      ['Cost', usd(t.costUsd)],
      ['Models', view.models ? 'planner ' + view.models.planner + ', generator ' + view.models.generator + ', evaluator ' + view.models.evaluator : null]
    ]));
  }

  function renderPlan(view) {
    var section = byId('plan');
    if (!view.plan) { section.replaceChildren(); return; }
    var plan = view.plan;
    section.replaceChildren(
      el('h2', null, plan.replan > 0 ? 'Plan (replan ' + plan.replan + ')' : 'Plan'),
      el('p', 'scope', plan.scope),
      table(['#', 'Step', 'Depends on', 'Status'], plan.steps.map(function (s, i) {
        var cell = el('div');
        cell.append(el('strong', 'step-title', s.title), el('div', 'muted', s.description));
        return [i + 1, cell, s.dependsOn.join(', ') || '—', pill(s.status)];
      })),
      el('h3', null, 'Criteria'),
      table(['Criterion', 'Weight', 'Threshold', 'Description'], plan.criteria.map(function (c) {
        return [c.name, c.weight, num(c.threshold), c.description];
      }), [false, false, true, false])
    );
  }

  function scoreChart(attempt) {
    var rowH = 24, labelW = 170, barW = 300, top = 6;
    var height = top + rowH * attempt.scores.length + 4;
    var root = svg('svg', {
      'class': 'scores', width: labelW + barW + 130, height: height, role: 'img',
      'data-attempt': attempt.attempt
    });
    attempt.scores.forEach(function (s, i) {
      var y = top + i * rowH;
      var g = svg('g', { 'class': 'score-row', 'data-criterion': s.criterion });
      g.append(svgText(0, y + 15, s.criterion, 'criterion'));
      g.append(svg('rect', { x: labelW, y: y + 3, width: barW, height: 16, 'class': 'track' }));
      var cls = s.score === null ? 'missing' : s.passed ? 'pass' : 'fail';
      var w = s.score === null ? barW : (s.score / 10) * barW;
      g.append(svg('rect', { x: labelW, y: y + 3, width: w, height: 16, 'class': 'bar ' + cls }));
      var tx = labelW + (s.threshold / 10) * barW;
      g.append(svg('line', { x1: tx, x2: tx, y1: y, y2: y + 22, 'class': 'threshold' }));
      g.append(svgText(labelW + barW + 8, y + 15, s.score === null ? 'no score' : num(s.score), 'score'));
      g.append(svgText(labelW + barW + 62, y + 15, '≥ ' + num(s.threshold), 'threshold-value'));
      root.append(g);
    });
    return root;
  }

  function renderAttempt(step, attempt) {
    var box = el('div', 'attempt');
    var head = el('h3');
    var verdict = attempt.verdict ? pill(attempt.verdict) : pill('running');
    head.append(el('span', null, 'Attempt ' + attempt.attempt + ' '), verdict);
    if (attempt.reason) head.append(el('span', 'muted', ' ' + attempt.reason + ', weighted mean ' + num(attempt.weightedMean)));
    box.append(head);
    if (attempt.scores.length > 0) box.append(scoreChart(attempt));
    if (attempt.workProblem) box.append(el('p', 'problem', 'Invalid work: ' + attempt.workProblem));
    if (attempt.evaluationProblem) box.append(el('p', 'problem', 'Invalid evaluation: ' + attempt.evaluationProblem));
    if (attempt.summary !== null) box.append(el('p', 'summary', 'Evaluation: ' + attempt.summary));
    if (attempt.findings.length) box.append(el('div', 'muted', 'Findings'), list(attempt.findings));
    if (attempt.feedback.length) box.append(el('div', 'muted', 'Actionable feedback'), list(attempt.feedback));
    if (attempt.output !== null) {
      box.append(details(step.stepNumber + '.' + attempt.attempt + '.output', 'Work output',
        el('pre', 'text output', attempt.output)));
    }
    return box;
  }

  function renderSteps(view) {
    var section = byId('steps');
    if (view.steps.length === 0) { section.replaceChildren(); return; }
    var nodes = [el('h2', null, 'Steps')];
    view.steps.forEach(function (step) {
      var box = el('div', 'step');
      box.dataset.step = String(step.stepNumber);
      var head = el('h3');
      head.append(el('span', null, 'Step ' + step.stepNumber + ': ' + step.title + ' '), pill(step.status));
      box.append(head);
      if (step.rounds.length) {
        box.append(el('div', 'muted', 'Contract rounds'), table(['Round', 'Proposal', 'Review', 'Amendments'],
          step.rounds.map(function (r) {
            var proposal = el('div');
            proposal.append(el('strong', null, r.title), list(r.acceptanceCriteria));
            return [r.round, proposal, r.review ? pill(r.review.status, r.review.status === 'approved' ? 'pass' : 'fail') : 'waiting',
              r.review && r.review.amendments.length ? list(r.review.amendments) : '—'];
          })));
      }
      if (step.contract) {
        box.append(el('p', null, step.contract.imposed
          ? 'Contract imposed at the round limit, with ' + step.contract.outstanding.length + ' outstanding amendments.'
          : 'Contract agreed.'));
      }
      if (step.decisions.length) {
        box.append(el('div', 'muted', 'Retry decisions'), list(step.decisions.map(function (d) {
          return d.signal + ' → attempt ' + d.nextAttempt + ' (weighted mean ' + num(d.previousMean) + ' → ' + num(d.lastMean) + ')';
        }), 'plain decisions'));
      }
      step.attempts.forEach(function (a) { box.append(renderAttempt(step, a)); });
      nodes.push(box);
    });
    section.replaceChildren.apply(section, nodes);
  }

  function usageBar(value, max) {
    var root = svg('svg', { width: 120, height: 12, 'class': 'usage' });
    root.append(svg('rect', { x: 0, y: 2, width: 120, height: 8, 'class': 'track' }));
    root.append(svg('rect', { x: 0, y: 2, width: max > 0 ? (value / max) * 120 : 0, height: 8, 'class': 'bar pass' }));
    return root;
  }

  function renderPhases(view) {
    var maxMs = Math.max.apply(null, view.phases.map(function (p) { return p.latencyMs; }));
    var rows = view.phases.map(function (p) {
      return [p.phase, p.calls, p.promptTokens, p.completionTokens, usd(p.costUsd), secs(p.latencyMs), usageBar(p.latencyMs, maxMs)];
    });
    var t = view.totals;
    rows.push(['total', t.calls, t.promptTokens, t.completionTokens, usd(t.costUsd), secs(t.latencyMs), '']);
    byId('phases').replaceChildren(el('h2', null, 'Usage by phase'),
      table(['Phase', 'Calls', 'Prompt tokens', 'Completion tokens', 'Cost', 'Time in calls', ''], rows,
        [false, true, true, true, true, true, false]));
  }

  function renderTimeline(view) {
    var section = byId('timeline');
    var old = section.querySelector('ol');
    var atEnd = !old || old.scrollTop + old.clientHeight >= old.scrollHeight - 4;
    var ol = el('ol');
    view.timeline.forEach(function (e) {
      var li = el('li');
      li.dataset.type = e.type;
      li.append(el('span', 'seq', '#' + e.seq), el('span', 'ts', e.ts.slice(11, 23)), el('span', 'text', e.text));
      ol.append(li);
    });
    section.replaceChildren(el('h2', null, 'Timeline (' + view.timeline.length + ' events)'), ol);
    if (atEnd) ol.scrollTop = ol.scrollHeight;
  }

  function render(view) {
    lastView = view;
    byId('empty').hidden = true;
    renderOverview(view);
    renderCharts(view);
    renderPlan(view);
    renderSteps(view);
    renderPhases(view);
    renderTimeline(view);
    document.body.dataset.run = view.runId;
    document.body.dataset.status = view.status;
  }

  function renderRuns(data) {
    var select = byId('run-select');
    var options = [el('option', null, 'latest run')];
    options[0].value = '';
    data.runs.forEach(function (r) {
      var o = el('option', null, (r.task || r.runId) + ' — ' + r.status + ' (' + r.runId + ')');
      o.value = r.runId;
      options.push(o);
    });
    select.replaceChildren.apply(select, options);
    select.value = selected;
    var problems = byId('problems');
    problems.hidden = data.problems.length === 0;
    problems.replaceChildren(el('h2', null, 'Problems'), list(data.problems));
  }

  function connect() {
    if (source) source.close();
    var url = '/events' + (selected ? '?run=' + encodeURIComponent(selected) : '');
    source = new EventSource(url);
    var status = byId('connection');
    source.addEventListener('open', function () { status.textContent = 'live'; status.className = 'pill passed'; });
    source.addEventListener('error', function () { status.textContent = 'reconnecting…'; status.className = 'pill failed'; });
    source.addEventListener('runs', function (e) { renderRuns(JSON.parse(e.data)); });
    source.addEventListener('view', function (e) { render(JSON.parse(e.data)); });
  }

  function start() {
    byId('run-select').addEventListener('change', function (e) {
      selected = e.target.value;
      connect();
    });
    fetch('/api/charts').then(function (r) { return r.json(); }).then(function (c) {
      charts = c;
      if (lastView) renderCharts(lastView);
    });
    connect();
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start); else start();
})();
`;
