import type { JudgedScore, RunEvent, RunEventOf, RunEventType } from '../schemas/index.js';

/**
 * The one place where a run event becomes words: the log's notes, the CLI's progress lines and
 * the dashboard's timeline all start from `describeEvent`, and each only formats its result (a
 * markdown line, a terminal line, a line of the page). A new event type without a describer is a
 * compile error here, so no reader can silently lack its line.
 */

/**
 * How much a person following a run cares about an event: a `milestone` stays in view (a step's
 * outcome, a run's end, an imposed contract), `progress` is the run moving on, and a `detail` (a
 * request, a model call, a delivery) is for those who asked to see everything.
 */
export type EventLevel = 'milestone' | 'progress' | 'detail';

/** What an event says, before any reader formats it. */
export interface EventDescription {
  /** The plan step the event is about (1-based), or null; each reader puts it in its own words. */
  step: number | null;
  /**
   * What happened, in plain words, without the step. Model text (a title, a problem, an error
   * message, a criterion's name) appears in it as it came, so a reader escapes the whole line.
   */
  text: string;
  /** Longer model text that says more (the task, a title, an output, a summary), for readers with room. */
  excerpt: string | null;
  level: EventLevel;
}

const plural = (n: number, word: string, many = `${word}s`): string => `${n} ${n === 1 ? word : many}`;
const mean = (value: number | null): string => (value === null ? '-' : value.toFixed(2));

/** Scores against thresholds: `accuracy 5/7 ✗, clarity 8/7 ✓`. */
export function formatScores(scores: readonly JudgedScore[]): string {
  return scores
    .map((s) => `${s.criterion} ${s.score ?? '-'}/${s.threshold} ${s.passed ? '✓' : '✗'}`)
    .join(', ');
}

/** Tokens and cost: `12,345 tokens, $0.0123`. */
export function formatUsage(tokens: number, costUsd: number): string {
  return `${tokens.toLocaleString('en-US')} tokens, $${costUsd.toFixed(4)}`;
}

function described(
  step: number | null,
  text: string,
  level: EventLevel,
  excerpt: string | null = null,
): EventDescription {
  return { step, text, excerpt, level };
}

/** The run's closing figures, shared by its two terminal events: steps passed, then usage. */
function totals(p: RunEventOf<'run.completed'>['payload']): { steps: string; usage: string } {
  const { promptTokens, completionTokens, costUsd } = p.usage;
  return {
    steps: `${p.stepsPassed}/${p.stepsTotal} steps passed`,
    usage: formatUsage(promptTokens + completionTokens, costUsd),
  };
}

/**
 * One describer per event type, in a mapped type over the union of event types: a type left out
 * (or a new one added to the schemas) does not compile.
 */
const DESCRIBERS: { readonly [T in RunEventType]: (event: RunEventOf<T>) => EventDescription } = {
  'run.started': (e) => {
    const { parent, logPath, task } = e.payload;
    const { job, continues } = e.payload;
    const fork =
      parent !== undefined
        ? ` (a fork of run ${parent.runId} from step ${parent.fromStep})`
        : continues !== undefined
          ? ` (run ${job?.run ?? 2} of job ${job?.id ?? continues.runId}, continuing run ${continues.runId})`
          : '';
    return described(null, `run ${e.runId} started${fork}; log: ${logPath}`, 'milestone', task);
  },
  'plan.requested': ({ payload: { input } }) =>
    described(
      null,
      `planner: plan requested${
        input.replan === null
          ? ''
          : input.replan.reason === 'disapproved'
            ? ' (replan: a person rejected the plan)'
            : input.replan.reason === 'plan_rejected'
              ? ` (replan: step ${input.replan.failedStepId} cannot pass as planned)`
              : ` (replan after step ${input.replan.failedStepId} was exhausted)`
      }`,
      'detail',
    ),
  'plan.created': ({ payload: { plan, criteria, replan, given } }) => {
    const rubric = criteria.map((c) => `${c.name} >= ${c.threshold}`).join(', ');
    const head =
      replan > 0
        ? `plan revised (replan ${replan})`
        : given === undefined
          ? 'plan created'
          : `plan given${given.file === null ? '' : ` (${given.file})`}, not planned`;
    return described(
      null,
      `${head}: ${plural(plan.steps.length, 'step')}; thresholds: ${rubric}`,
      'milestone',
    );
  },
  'plan.truncated': ({ payload: p }) =>
    described(null, `plan cut from ${p.from} to ${p.to} steps (maxSteps)`, 'milestone'),
  'step.started': ({ payload: p }) => described(p.stepNumber, `started: ${p.title}`, 'progress'),
  'step.carried': ({ payload: p }) =>
    described(p.stepNumber, `kept: ${p.title} (passed in run ${p.fromRunId})`, 'progress'),
  'step.contract.requested': ({ payload: { input } }) =>
    described(input.stepNumber, `generator: contract proposal requested (round ${input.round})`, 'detail'),
  'step.review.requested': ({ payload: { input } }) =>
    described(
      input.stepNumber,
      `evaluator: contract review requested (round ${input.round} of ${input.maxRounds})`,
      'detail',
    ),
  'step.contract.proposed': ({ payload: p }) =>
    described(p.stepNumber, `contract proposed (round ${p.round})`, 'detail', p.proposal.title),
  'step.contract.reviewed': ({ payload: { stepNumber, round, review } }) =>
    review.status === 'approved'
      ? described(stepNumber, `contract approved (round ${round})`, 'detail', review.rationale)
      : described(
          stepNumber,
          `contract round ${round}: ${plural(review.amendments.length, 'amendment')} requested`,
          'progress',
          review.rationale,
        ),
  'step.contract.agreed': ({ payload: p }) =>
    described(p.stepNumber, `contract agreed (${plural(p.contract.rounds, 'round')})`, 'progress'),
  'step.contract.imposed': ({ payload: p }) =>
    described(
      p.stepNumber,
      `contract imposed after ${plural(p.contract.rounds, 'round')} (${plural(p.outstandingAmendments.length, 'amendment')} added)`,
      'milestone',
    ),
  'step.work.requested': ({ payload: { input } }) =>
    described(input.stepNumber, `generator: work requested (attempt ${input.attempt})`, 'detail'),
  'step.work.completed': ({ payload: p }) => {
    if (p.validation === undefined)
      return described(p.stepNumber, `attempt ${p.attempt}: work delivered`, 'detail', p.work.output);
    const failed = p.validation.filter((v) => !v.passed);
    const verdict =
      failed.length === 0
        ? `${plural(p.validation.length, 'validator')} passed`
        : `validator ${failed.map((v) => `"${v.validator}"`).join(', ')} failed: ${failed[0]!.output.trim().split('\n').at(-1) ?? ''}`;
    return described(
      p.stepNumber,
      `attempt ${p.attempt}: work delivered; ${verdict}`,
      failed.length === 0 ? 'detail' : 'progress',
      p.work.output,
    );
  },
  'step.work.invalid': ({ payload: p }) =>
    described(p.stepNumber, `attempt ${p.attempt}: invalid work: ${p.problem}`, 'milestone'),
  'step.evaluation.requested': ({ payload: { input } }) =>
    described(input.stepNumber, `evaluator: evaluation requested (attempt ${input.attempt})`, 'detail'),
  'step.evaluation.completed': ({ payload: p }) =>
    described(p.stepNumber, `attempt ${p.attempt}: evaluation received`, 'detail', p.evaluation.summary),
  'step.evaluation.invalid': ({ payload: p }) =>
    described(p.stepNumber, `attempt ${p.attempt}: invalid evaluation: ${p.problem}`, 'milestone'),
  'step.attempt.judged': ({ payload: p }) => {
    const how = p.verdict === 'pass' ? 'passed' : `failed (${p.reason.replaceAll('_', ' ')})`;
    // Work its validators failed was never scored: the validators' line said why.
    const scores =
      p.reason === 'failed_validation' ? '' : `: ${formatScores(p.scores)}; mean ${mean(p.weightedMean)}`;
    return described(p.stepNumber, `attempt ${p.attempt} ${how}${scores}`, 'progress');
  },
  'step.retry.scheduled': ({ payload: p }) => {
    const trend =
      p.previousMean === null
        ? `mean ${mean(p.lastMean)}`
        : `mean ${mean(p.previousMean)} -> ${mean(p.lastMean)}, ${p.signal === 'refine' ? 'improving' : 'not improving'}`;
    return described(p.stepNumber, `retry: attempt ${p.nextAttempt} will ${p.signal} (${trend})`, 'progress');
  },
  'step.passed': ({ payload: p }) => described(p.stepNumber, `passed on attempt ${p.attempt}`, 'milestone'),
  'approval.requested': ({ payload: p }) =>
    described(
      p.stepNumber,
      `waiting for a decision on the ${p.gate === 'step' ? `result of attempt ${p.attempt}` : p.gate} (${p.gate} gate)`,
      'milestone',
      p.summary,
    ),
  'approval.decided': ({ payload: p }) =>
    described(
      null,
      `${p.gate} ${p.decision === 'approve' ? 'approved' : 'rejected'} by ${p.by}${p.reason === null ? '' : `: ${p.reason}`}`,
      'milestone',
    ),
  'step.plan.rejected': ({ payload: p }) =>
    described(
      p.stepNumber,
      `attempt ${p.attempt}: the evaluator found the plan at fault; the planner revises it`,
      'milestone',
    ),
  'step.failed': ({ payload: p }) => {
    const best = p.bestAttempt === null ? 'no usable attempt' : `keeps attempt ${p.bestAttempt}`;
    return described(
      p.stepNumber,
      `failed after ${plural(p.attempts, 'attempt')} (${best}); on exhausted: ${p.policy}`,
      'milestone',
    );
  },
  'model.call.completed': ({ payload: c }) => {
    const tokens = `${c.promptTokens} in + ${c.completionTokens} out tokens`;
    const repair = c.repair > 0 ? `, repair ${c.repair}` : '';
    const invalid = c.outcome === 'invalid' ? `, invalid: ${c.problem ?? 'no reason given'}` : '';
    const tools = (c.toolCalls ?? [])
      .map((t) => `${t.name}(${t.arguments.slice(0, 80)})${t.ok ? '' : ' failed'}`)
      .join(', ');
    return described(
      null,
      `model call: ${c.role} ${c.phase} (${c.model}) ${tokens}, $${c.costUsd.toFixed(4)}, ${Math.round(c.latencyMs)} ms${repair}${invalid}${tools === '' ? '' : `; tools: ${tools}`}`,
      'detail',
    );
  },
  'role.failed': ({ payload: { role, phase, error } }) =>
    described(null, `${role} failed (${phase}): ${error.name}: ${error.message}`, 'milestone'),
  'request.cancelled': ({ payload: { requestId, phase, reason } }) =>
    described(null, `request ${requestId} (${phase}) cancelled: ${reason}`, 'detail'),
  'run.resumed': ({ payload: p }) => {
    const repeated =
      p.repeated.length === 0
        ? 'no call was in flight'
        : `asking again ${plural(p.repeated.length, 'request')} in flight at the crash (${p.repeated.join(', ')})`;
    const torn = p.discardedBytes > 0 ? `; removed a torn write of ${plural(p.discardedBytes, 'byte')}` : '';
    return described(
      null,
      `run resumed by ${p.owner} after event ${p.fromSeq} (paused ${(p.pausedMs / 1000).toFixed(1)}s): ${repeated}${torn}`,
      'milestone',
    );
  },
  'result.rejected': ({ payload: { requestId, worker, reason } }) =>
    described(null, `${reason} result for request ${requestId} from ${worker}: not applied`, 'milestone'),
  'run.completed': ({ payload: p }) => {
    const head = p.passed ? 'run passed' : 'run finished with failed steps';
    const { steps, usage } = totals(p);
    const retries = plural(p.totalRetries, 'retry', 'retries');
    const took = `${(p.durationMs / 1000).toFixed(1)}s`;
    return described(null, `${head}: ${steps}, ${retries}, ${usage}, ${took}`, 'milestone', p.summary);
  },
  'run.failed': ({ payload: p }) => {
    const { steps, usage } = totals(p);
    return described(null, `run stopped (${p.reason}): ${p.message}; ${steps}, ${usage}`, 'milestone');
  },
};

/** What `event` says: its step, its line, a longer excerpt of model text, and how much it matters. */
export function describeEvent(event: RunEvent): EventDescription {
  // The mapped type pairs each type with its describer; TypeScript cannot follow the pairing through
  // an indexed access on a union, hence the widening.
  const describe = DESCRIBERS[event.type] as (event: RunEvent) => EventDescription;
  return describe(event);
}

/**
 * The description as one line that reads on its own, as the log and the dashboard show it:
 * `Step 2 passed on attempt 3`, `Model call: …`. The CLI writes the step as `step i/n` instead.
 */
export function describeLine(event: RunEvent): string {
  const { step, text } = describeEvent(event);
  return step === null ? `${text.charAt(0).toUpperCase()}${text.slice(1)}` : `Step ${step} ${text}`;
}
