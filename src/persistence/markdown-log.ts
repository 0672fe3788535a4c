import { describeLine } from '../events/describe-event.js';
import { documentOfPlan, type RunEvent, type RunEventOf } from '../schemas/index.js';

/**
 * Rendering of the shared-state log: one chunk per event, computed from the event alone, so a
 * writer needs no state but the file. Headings keep the reference's words (swarms PGE, section 3);
 * every chunk ends with its event as JSON so the file parses back into the exact event sequence.
 *
 * Safety invariant: no model-produced text ever starts a line outside a fenced block. Multi-line
 * text goes into a fence longer than any backtick run it holds (so no line of it can close the
 * fence), and single-line text (table cells, summaries) is escaped by `inline`, which removes line
 * breaks and so can never begin a heading, a fence or an event marker.
 */

/** The first line of every log. */
export const LOG_TITLE = '# PGE Harness Shared State';
/** The prefix of the header line that names the run a log belongs to. */
export const RUN_ID_PREFIX = '**Run ID**: ';

/** Length of the longest run of backticks in `text`, found with `indexOf` jumps, not a regex. */
function longestBacktickRun(text: string): number {
  let longest = 0;
  let i = text.indexOf('`');
  while (i !== -1) {
    let j = i + 1;
    while (text.charCodeAt(j) === 96) j++;
    if (j - i > longest) longest = j - i;
    i = text.indexOf('`', j);
  }
  return longest;
}

/** A backtick fence longer than any backtick run in `text` (at least 3), so `text` cannot close it. */
export function fenceFor(text: string): string {
  return '`'.repeat(Math.max(3, longestBacktickRun(text) + 1));
}

/** `text` in a fenced code block that it cannot escape from, followed by a newline. */
export function fenced(text: string, info = ''): string {
  const fence = fenceFor(text);
  return `${fence}${info}\n${text}\n${fence}\n`;
}

const INLINE_TEST = /[\\`|<&\r\n]/;
const INLINE_ALL = /\r\n|[\\`|<&\r\n]/g;
const INLINE_ESCAPES: Record<string, string> = {
  '\\': '\\\\',
  '`': '\\`',
  '|': '\\|',
  '<': '&lt;',
  '&': '&amp;',
};

/**
 * Model text made safe for one line of markdown or a table cell: line breaks become `<br>`, and
 * `|`, backticks, `\`, `<` and `&` are escaped, so it cannot split a table row, open a code span,
 * or smuggle raw HTML (an unclosed `<!--` would hide the rest of the log in a viewer).
 */
export function inline(text: string): string {
  if (!INLINE_TEST.test(text)) return text;
  return text.replace(INLINE_ALL, (c) => INLINE_ESCAPES[c] ?? '<br>');
}

/** The line that introduces an event's JSON block; the reader recognises it only outside fences. */
export function eventMarker(event: Pick<RunEvent, 'seq' | 'type'>): string {
  return `<!-- pge:event seq=${event.seq} type=${event.type} -->`;
}

/** The chunk that the log holds for `event`: its section or note, then the event as JSON. */
export function renderEvent(event: RunEvent): string {
  return `${renderBody(event)}${eventMarker(event)}\n${fenced(JSON.stringify(event), 'json')}`;
}

/** The whole log of a sequence of events, as a writer appending them in order produces it. */
export function renderLog(events: readonly RunEvent[]): string {
  let out = '';
  for (const event of events) out += renderEvent(event);
  return out;
}

function section(label: string, ts: string, body: string): string {
  return `\n---\n### [${label}] (${ts})\n\n${body}`;
}

function note(event: RunEvent, summary: string, details = ''): string {
  return `\n#### ${event.type} (${event.ts})\n\n${summary}\n\n${details}`;
}

const retryLabel = (attempt: number): string => (attempt > 1 ? ` (Retry ${attempt - 1})` : '');
const roundLabel = (round: number): string => (round > 1 ? ` (Round ${round})` : '');

/** A labelled fenced block, or `_none_` when the text is empty. */
function block(label: string, text: string): string {
  return `**${label}**\n\n${text === '' ? '_none_\n' : fenced(text)}\n`;
}

/** A list of model strings as one fenced block; continuation lines are indented under their item. */
function listBlock(label: string, items: readonly string[]): string {
  if (items.length === 0) return block(label, '');
  return block(label, items.map((item) => `- ${item.replaceAll('\n', '\n  ')}`).join('\n'));
}

function table(header: readonly string[], rows: readonly (readonly (string | number)[])[]): string {
  if (rows.length === 0) return '_none_\n\n';
  let out = `| ${header.join(' | ')} |\n|${' --- |'.repeat(header.length)}\n`;
  for (const row of rows)
    out += `| ${row.map((cell) => (typeof cell === 'number' ? String(cell) : inline(cell))).join(' | ')} |\n`;
  return `${out}\n`;
}

const usd = (n: number): string => `$${n.toFixed(4)}`;
const seconds = (ms: number): string => `${(ms / 1000).toFixed(1)} s`;
const plural = (n: number, one: string, many = `${one}s`): string => `${n} ${n === 1 ? one : many}`;

function renderBody(event: RunEvent): string {
  switch (event.type) {
    case 'run.started':
      return renderHeader(event);
    case 'plan.created':
      return section(
        event.payload.replan > 0
          ? `PLANNER OUTPUT (Replan ${event.payload.replan})`
          : event.payload.given === undefined
            ? 'PLANNER OUTPUT'
            : 'GIVEN PLAN',
        event.ts,
        renderPlan(event.payload),
      );
    case 'step.carried': {
      const { stepNumber, title, fromRunId } = event.payload;
      return section(
        `STEP ${stepNumber} KEPT`,
        event.ts,
        `**${inline(title)}** passed in run ${fromRunId}: its artifact stands, and the step is not run again.\n\n`,
      );
    }
    case 'step.contract.proposed':
      return section(
        `STEP ${event.payload.stepNumber} CONTRACT PROPOSAL${roundLabel(event.payload.round)}`,
        event.ts,
        renderProposal(event.payload.proposal),
      );
    case 'step.contract.reviewed': {
      const { stepNumber, round, review } = event.payload;
      return section(
        `STEP ${stepNumber} CONTRACT REVIEW${roundLabel(round)}`,
        event.ts,
        `**Status**: ${review.status}\n\n${listBlock('Amendments', review.amendments)}${block('Rationale', review.rationale)}`,
      );
    }
    case 'step.work.completed':
      return section(
        `STEP ${event.payload.stepNumber} WORK LOG${retryLabel(event.payload.attempt)}`,
        event.ts,
        renderWork(event.payload),
      );
    case 'step.evaluation.completed':
      return section(
        `STEP ${event.payload.stepNumber} EVALUATION${retryLabel(event.payload.attempt)}`,
        event.ts,
        renderEvaluation(event.payload),
      );
    case 'step.evaluation.invalid':
      return section(
        `STEP ${event.payload.stepNumber} EVALUATION${retryLabel(event.payload.attempt)}`,
        event.ts,
        `**Attempt**: ${event.payload.attempt} — the evaluation is invalid\n\n${block('Problem', event.payload.problem)}${block('Raw answer', event.payload.raw ?? '')}`,
      );
    case 'run.resumed':
      return section('RUN RESUMED', event.ts, renderResumed(event.payload));
    case 'run.completed':
    case 'run.failed':
      return section('HARNESS SUMMARY', event.ts, renderSummary(event));
    default:
      return renderNote(event);
  }
}

type Payload<T extends RunEvent['type']> = RunEventOf<T>['payload'];

function renderProposal(proposal: Payload<'step.contract.proposed'>['proposal']): string {
  return `**Title**: ${inline(proposal.title)}\n\n${listBlock('Acceptance criteria', proposal.acceptanceCriteria)}${block('Expected output', proposal.expectedOutput)}${block('Verification method', proposal.verificationMethod)}`;
}

/** A work answer: its output, notes and self-assessment, then its validators' runs if it had any. */
function renderWork({ attempt, work, validation }: Payload<'step.work.completed'>): string {
  const selfRows = work.selfAssessment.map((s) => [s.criterion, s.score, s.comment]);
  return `**Attempt**: ${attempt}\n\n${block('Output', work.output)}${block('Notes', work.notes)}**Self-assessment**\n\n${table(['Criterion', 'Score', 'Comment'], selfRows)}${validation === undefined ? '' : renderValidation(validation)}`;
}

/** The validators' runs of a work answer, with the output of each that failed. */
function renderValidation(validation: NonNullable<Payload<'step.work.completed'>['validation']>): string {
  const rows = validation.map((v) => [
    v.validator,
    v.passed ? 'yes' : 'no',
    v.exitCode ?? '-',
    Math.round(v.durationMs),
  ]);
  const failed = validation
    .filter((v) => !v.passed)
    .map((v) => block('Failed validator', `${v.validator}\n\n${v.output}`))
    .join('');
  return `\n**Validators**\n\n${table(['Validator', 'Passed', 'Exit code', 'ms'], rows)}${failed}`;
}

function renderEvaluation({ attempt, evaluation }: Payload<'step.evaluation.completed'>): string {
  const rows = evaluation.scores.map((s) => [s.criterion, s.score, s.evidence]);
  return `**Attempt**: ${attempt}\n\n**Scores**\n\n${table(['Criterion', 'Score', 'Evidence'], rows)}${listBlock('Findings', evaluation.findings)}${listBlock('Actionable feedback', evaluation.actionableFeedback)}${block('Summary', evaluation.summary)}`;
}

function renderHeader(event: RunEventOf<'run.started'>): string {
  const { task, settings } = event.payload;
  const { budgets, models } = settings;
  const limits = [
    budgets.maxCostUsd === null ? null : usd(budgets.maxCostUsd),
    budgets.maxTokens === null ? null : `${budgets.maxTokens} tokens`,
    budgets.maxDurationMs === null ? null : seconds(budgets.maxDurationMs),
  ].filter((s) => s !== null);
  return (
    `${LOG_TITLE}\n\n${RUN_ID_PREFIX}${event.runId}\n**Created**: ${event.ts}\n\n---\n\n## User Prompt\n\n${fenced(task)}\n` +
    `- **Models**: planner ${inline(models.planner)}, generator ${inline(models.generator)}, evaluator ${inline(models.evaluator)}\n` +
    `- **Limits**: at most ${plural(settings.maxSteps, 'step')}, ${plural(settings.maxRetriesPerStep, 'retry', 'retries')} per step, ` +
    `${plural(settings.maxContractRounds, 'contract round')}; budgets: ${limits.length === 0 ? 'none' : limits.join(', ')}\n` +
    `- **When a step is exhausted**: ${settings.onStepExhausted} (at most ${plural(settings.maxReplans, 'replan')})\n` +
    `- **Steps side by side**: at most ${settings.maxParallelSteps}, along the plan's dependencies\n` +
    (event.payload.startedBy === undefined ? '' : `- **Started by**: ${inline(event.payload.startedBy)}\n`) +
    (event.payload.continues === undefined
      ? ''
      : `- **Continues**: run ${inline(event.payload.continues.runId)} (${inline(event.payload.continues.logPath)}), run ${event.payload.job?.run ?? 2} of job ${inline(event.payload.job?.id ?? event.payload.continues.runId)}; ${plural(event.payload.continues.carried.length, 'step')} kept\n`) +
    (event.payload.parent === undefined
      ? '\n'
      : `- **Forked from**: run ${inline(event.payload.parent.runId)} (${inline(event.payload.parent.logPath)}) at step ${event.payload.parent.fromStep}: its events before that step are this run's\n\n`)
  );
}

function renderResumed(p: RunEventOf<'run.resumed'>['payload']): string {
  const repeated = p.repeated.length === 0 ? 'none (no call was in flight)' : p.repeated.join(', ');
  const torn = p.discardedBytes > 0 ? `- **Torn write removed**: ${plural(p.discardedBytes, 'byte')}\n` : '';
  return (
    `- **Resumed by**: ${inline(p.owner)}\n- **Rebuilt from**: events 1 to ${p.fromSeq}, without asking a model again\n` +
    `- **Asked again** (in flight at the crash): ${repeated}\n` +
    `- **Paused**: ${seconds(p.pausedMs)} (not counted in the run's duration)\n${torn}\n`
  );
}

function renderPlan({ plan, criteria, replan, given }: RunEventOf<'plan.created'>['payload']): string {
  let out =
    given === undefined
      ? ''
      : `**Given**: ${given.file === null ? 'through the API' : `from ${inline(given.file)}`}, not planned\n\n`;
  out += block('Scope', plan.scope);
  out += '**Steps**\n\n';
  plan.steps.forEach((step, i) => {
    const deps = step.dependsOn.length === 0 ? 'none' : step.dependsOn.join(', ');
    out += `**Step ${i + 1}: ${inline(step.title)}** (id ${step.id}; depends on: ${deps})\n\n`;
    out += `${block('Description', step.description)}${block('Expected output', step.expectedOutput)}`;
  });
  const rows = criteria.map((c) => [c.name, c.weight, c.description, c.threshold]);
  out += `**Criteria**\n\n${table(['Criterion', 'Weight', 'Description', 'Threshold'], rows)}`;
  // A replan's plan as a document, for a person to edit and run (`pge run --plan`, `pge continue --plan`).
  if (replan > 0) out += block('Plan document', JSON.stringify(documentOfPlan(plan, { criteria }), null, 2));
  return out;
}

function renderSummary(event: RunEventOf<'run.completed'> | RunEventOf<'run.failed'>): string {
  const p = event.payload;
  const result =
    event.type === 'run.failed'
      ? `FAILED (${event.payload.reason})`
      : p.passed
        ? 'PASSED'
        : 'COMPLETED WITH FAILED STEPS';
  let out =
    `- **Result**: ${result}\n- **Steps passed**: ${p.stepsPassed} / ${p.stepsTotal}\n- **Total retries**: ${p.totalRetries}\n` +
    `- **Model calls**: ${p.usage.calls} (${p.usage.promptTokens} prompt + ${p.usage.completionTokens} completion tokens, ${usd(p.usage.costUsd)})\n` +
    `- **Duration**: ${seconds(p.durationMs)}\n\n`;
  if (p.byPhase.length > 0) {
    // The per-phase breakdown the design article reports by hand.
    const rows = p.byPhase.map((x) => [
      x.phase,
      x.calls,
      seconds(x.latencyMs),
      x.promptTokens,
      x.completionTokens,
      usd(x.costUsd),
    ]);
    out += table(['Phase', 'Calls', 'Model time', 'Prompt tokens', 'Completion tokens', 'Cost'], rows);
  }
  if (event.type === 'run.failed')
    out += block('Why it stopped', event.payload.message) + inFlightBlock(event);
  return out + block('Summary', p.summary);
}

/** The steps that were running when the run stopped, each where its chart stood. */
function inFlightBlock(event: RunEventOf<'run.failed'>): string {
  const steps = event.payload.inFlight ?? [];
  if (steps.length === 0) return '';
  const rows = steps.map((s) => [s.stepNumber, s.stepId, s.attempt, s.state]);
  return `**Steps stopped in flight**\n\n${table(['Step', 'Id', 'Attempt', 'State'], rows)}`;
}

/**
 * A `####` note: the event's shared description on one line (escaped as a whole, since model text
 * may be in it), and for two events the model text that does not fit on a line.
 */
function renderNote(event: RunEvent): string {
  return note(event, inline(describeLine(event)), noteDetails(event));
}

function noteDetails(event: RunEvent): string {
  if (event.type === 'step.contract.imposed')
    return listBlock('Outstanding amendments', event.payload.outstandingAmendments);
  if (event.type === 'role.failed' && event.payload.raw !== null)
    return block('Raw answer', event.payload.raw);
  return '';
}
