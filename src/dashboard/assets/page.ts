/**
 * The dashboard page and its stylesheet, served by pge itself. They are strings in a module rather
 * than files so that they ship inside `dist` with the code that serves them. The page is a shell
 * with no data in it: `app.js` fills it with DOM nodes and text, never with markup.
 */

/** The page. No inline script or style: the Content-Security-Policy forbids both. */
export const PAGE_HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>pge dashboard</title>
<link rel="stylesheet" href="/app.css">
<script src="/app.js" defer></script>
</head>
<body>
<header>
  <h1>pge dashboard</h1>
  <span id="connection" class="pill">connecting…</span>
</header>
<main>
  <section id="problems" hidden></section>
  <section id="runs" aria-labelledby="runs-title">
    <div class="runs-head"><h2 id="runs-title">Runs</h2><label for="status-filter">Filter by status</label> <select id="status-filter"><option value="">all</option></select></div>
    <div id="run-list"></div>
  </section>
  <p id="empty">Waiting for a run… (a log that does not exist yet is waited for; on NATS, start a run).</p>
  <section id="overview"></section>
  <p id="action-status" role="status" aria-live="polite" hidden></p>
  <section id="control" aria-label="Actions" hidden></section>
  <section id="charts" aria-label="Statecharts">
    <div class="chart" role="figure" aria-labelledby="session-chart-title"><h2 id="session-chart-title">Session statechart</h2><div id="session-chart"></div></div>
    <div class="chart" role="figure" aria-labelledby="run-chart-title"><h2 id="run-chart-title">Run statechart</h2><div id="run-chart"></div></div>
    <div class="chart" role="figure" aria-labelledby="step-chart-title"><h2 id="step-chart-title">Step statechart</h2><div id="step-chart"></div></div>
    <div id="next-transitions"></div>
  </section>
  <section id="plan"></section>
  <section id="steps"></section>
  <section id="phases"></section>
  <section id="timeline"></section>
  <section id="start-run" aria-label="Start a run" hidden></section>
</main>
<div id="chart-tip" role="tooltip" hidden></div>
</body>
</html>
`;

/** The stylesheet. System fonts only: no font is fetched from anywhere. */
export const APP_STYLE = `:root {
  --fg: #1d2330; --muted: #5b6475; --line: #d5dae3; --bg: #f6f7f9; --card: #fff;
  --pass: #1f8a4c; --fail: #c0392b; --accent: #2f6fdf; --active: #ffd75e; --path: #fff3c4;
  font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; font-size: 14px; color: var(--fg);
}
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); }
header { display: flex; flex-wrap: wrap; gap: 8px 16px; align-items: center; padding: 10px 20px; background: #1d2330; color: #fff; }
header h1 { font-size: 18px; margin: 0 12px 0 0; }
#runs .runs-head { display: flex; flex-wrap: wrap; gap: 8px 16px; align-items: baseline; }
#runs table.runs tr[aria-current="true"] { background: var(--path); }
#runs .run-id { font-size: 11px; }
/* One column no wider than the window: a long line wraps or scrolls in its own box. */
main { padding: 12px 20px 40px; display: grid; grid-template-columns: minmax(0, 1fr); gap: 14px; }
section { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 12px 16px; }
section:empty { display: none; }
h2 { font-size: 15px; margin: 4px 0 10px; }
h3 { font-size: 14px; margin: 12px 0 6px; }
.pill { display: inline-block; padding: 2px 10px; border-radius: 999px; background: #e7ebf2; color: var(--fg); font-size: 12px; }
.pill.running { background: #dde8fb; color: var(--accent); }
.pill.passed, .pill.pass { background: #dcf2e4; color: var(--pass); }
.pill.failed, .pill.fail { background: #f8dcd8; color: var(--fail); }
.pill.pending { background: #eee; color: var(--muted); }
.pill.waiting { background: #ffe9a8; color: #7a5a00; }
.pill.completed, .pill.cancelled, .pill.stopped, .pill.interrupted, .pill.aborted { background: #f8dcd8; color: var(--fail); }
#problems { border-color: var(--fail); color: var(--fail); }
.facts { display: grid; grid-template-columns: max-content 1fr; gap: 4px 14px; margin: 0; }
.facts dt { color: var(--muted); }
.facts dd { margin: 0; white-space: pre-wrap; overflow-wrap: anywhere; }
#charts { display: flex; flex-wrap: wrap; align-items: flex-start; gap: 10px 28px; }
.chart { flex: 0 1 auto; min-width: 0; max-width: 100%; }
#next-transitions { flex: 1 0 100%; }
svg.statechart { display: block; max-width: 100%; height: auto; }
svg .state rect { fill: #fff; stroke: #8a94a6; stroke-width: 1; }
svg .state.compound > rect { fill: #f4f6fa; }
svg .state.final > rect { stroke-width: 2.5; }
svg .state.on-path > rect { fill: var(--path); stroke: #c9a100; }
svg .state.active > rect { fill: var(--active); stroke: #8a6d00; stroke-width: 2.5; }
svg .state text { font-size: 12px; fill: var(--fg); }
svg .state text.invoke { font-size: 10px; fill: var(--muted); }
svg .state .step-mark-badge { fill: #8a6d00; }
svg .state text.step-mark { font-size: 10px; font-weight: 600; fill: #fff; text-anchor: middle; }
svg .edge path { fill: none; }
svg .edge .line { stroke: #a9b2c2; stroke-width: 1; }
svg .edge .hit { stroke: transparent; stroke-width: 10; pointer-events: stroke; }
svg .edge.from-active .line { stroke: #8a6d00; stroke-width: 1.6; }
svg .edge.pointed .line { stroke: var(--accent); stroke-width: 2.2; }
svg .arrowhead { fill: #a9b2c2; }
#chart-tip { position: fixed; z-index: 10; max-width: 420px; padding: 4px 8px; border-radius: 4px; background: #1d2330; color: #fff; font-size: 12px; white-space: pre-line; pointer-events: none; }
#chart-tip[hidden] { display: none; }
#next-transitions { color: var(--muted); font-size: 12px; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { color: var(--muted); font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.step { border-top: 1px solid var(--line); padding-top: 8px; margin-top: 8px; }
.attempt { margin: 8px 0 8px 12px; }
svg.scores text { font-size: 12px; fill: var(--fg); }
svg.scores .bar.pass { fill: #5cbf84; }
svg.scores .bar.fail { fill: #e48b80; }
svg.scores .bar.missing { fill: #ccc; }
svg.scores .track, svg.usage .track { fill: #eef1f5; }
svg.usage .bar { fill: #7ea6ef; }
svg.scores .threshold { stroke: #1d2330; stroke-width: 2; }
pre.text { white-space: pre-wrap; overflow-wrap: anywhere; background: #f4f6fa; padding: 8px; border-radius: 6px; margin: 4px 0; max-height: 320px; overflow-y: auto; }
ul.plain { margin: 4px 0; padding-left: 18px; }
.muted { color: var(--muted); }
#timeline ol { list-style: none; padding: 0; margin: 0; max-height: 420px; overflow-y: auto; font-size: 12px; }
#timeline li { display: grid; grid-template-columns: 44px 92px 1fr; gap: 8px; padding: 2px 0; border-bottom: 1px dotted var(--line); }
#timeline .seq, #timeline .ts { color: var(--muted); font-variant-numeric: tabular-nums; }
#timeline .text { overflow-wrap: anywhere; }
#control, #start-run { border-color: var(--accent); }
#control .gate, #control .cancel, #control .fork { border-top: 1px solid var(--line); padding-top: 8px; margin-top: 8px; }
label.field { display: flex; flex-wrap: wrap; gap: 4px 10px; align-items: center; margin: 6px 0; }
label.field > span { min-width: 180px; color: var(--muted); }
label.field textarea, label.field input:not([type=checkbox]) { flex: 1 1 320px; max-width: 640px; font: inherit; padding: 4px 6px; }
fieldset { border: 1px solid var(--line); border-radius: 6px; margin: 6px 0; }
fieldset label.field > span { min-width: 0; }
button { font: inherit; padding: 5px 14px; border-radius: 6px; border: 1px solid #8a94a6; background: #fff; cursor: pointer; margin: 4px 8px 4px 0; }
button.primary { background: var(--accent); border-color: var(--accent); color: #fff; }
button.danger { border-color: var(--fail); color: var(--fail); }
button:focus-visible, input:focus-visible, textarea:focus-visible { outline: 3px solid #ffbf47; outline-offset: 1px; }
#action-status { margin: 0; padding: 6px 12px; border-radius: 6px; background: #dde8fb; }
#action-status.failed { background: #f8dcd8; color: var(--fail); }
#action-status:empty { display: none; }
`;
