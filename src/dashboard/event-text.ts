import type { RunEvent } from '../schemas/index.js';

/**
 * One line per event for the dashboard's timeline: what happened, in a reader's words, with the
 * figures that matter. Model text is cut short here (the step panels show it whole); it stays
 * plain text, and the page shows it as text.
 */

const MAX_TEXT = 160;

/** `text` on one line, cut at `MAX_TEXT` characters. */
function short(text: string): string {
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length > MAX_TEXT ? `${line.slice(0, MAX_TEXT - 1)}…` : line;
}

const mean = (n: number | null) => (n === null ? 'n/a' : n.toFixed(2));
const usd = (n: number) => `$${n.toFixed(4)}`;

/** The timeline text of one event. */
export function describeEvent(event: RunEvent): string {
  switch (event.type) {
    case 'run.started':
      return `Run started: ${short(event.payload.task)}`;
    case 'plan.requested':
      return event.payload.input.replan ? 'Planner asked to replan' : 'Planner asked for a plan';
    case 'plan.created': {
      const { plan, replan } = event.payload;
      const what = `${plan.steps.length} steps, ${event.payload.criteria.length} criteria`;
      return replan > 0 ? `Plan revised (replan ${replan}): ${what}` : `Plan created: ${what}`;
    }
    case 'plan.truncated':
      return `Plan cut from ${event.payload.from} to ${event.payload.to} steps`;
    case 'step.started':
      return `Step ${event.payload.stepNumber} started: ${short(event.payload.title)}`;
    case 'step.contract.requested':
      return `Step ${event.payload.input.stepNumber}: contract proposal requested (round ${event.payload.input.round})`;
    case 'step.contract.proposed':
      return `Step ${event.payload.stepNumber}: contract proposed (round ${event.payload.round}): ${short(event.payload.proposal.title)}`;
    case 'step.review.requested':
      return `Step ${event.payload.input.stepNumber}: contract review requested (round ${event.payload.input.round})`;
    case 'step.contract.reviewed': {
      const { review, round } = event.payload;
      const amendments = review.amendments.length > 0 ? `, ${review.amendments.length} amendments` : '';
      return `Step ${event.payload.stepNumber}: contract review (round ${round}): ${review.status}${amendments}`;
    }
    case 'step.contract.agreed':
      return `Step ${event.payload.stepNumber}: contract agreed after ${event.payload.contract.rounds} rounds`;
    case 'step.contract.imposed':
      return `Step ${event.payload.stepNumber}: contract imposed with ${event.payload.outstandingAmendments.length} outstanding amendments`;
    case 'step.work.requested':
      return `Step ${event.payload.input.stepNumber}: work requested (attempt ${event.payload.input.attempt}${event.payload.input.retry ? `, ${event.payload.input.retry.signal}` : ''})`;
    case 'step.work.completed':
      return `Step ${event.payload.stepNumber}: work done (attempt ${event.payload.attempt}): ${short(event.payload.work.output)}`;
    case 'step.work.invalid':
      return `Step ${event.payload.stepNumber}: work invalid (attempt ${event.payload.attempt}): ${short(event.payload.problem)}`;
    case 'step.evaluation.requested':
      return `Step ${event.payload.input.stepNumber}: evaluation requested (attempt ${event.payload.input.attempt})`;
    case 'step.evaluation.completed':
      return `Step ${event.payload.stepNumber}: evaluated (attempt ${event.payload.attempt}): ${short(event.payload.evaluation.summary)}`;
    case 'step.evaluation.invalid':
      return `Step ${event.payload.stepNumber}: evaluation invalid (attempt ${event.payload.attempt}): ${short(event.payload.problem)}`;
    case 'step.attempt.judged': {
      const p = event.payload;
      return `Step ${p.stepNumber}: attempt ${p.attempt} ${p.verdict === 'pass' ? 'passed' : 'failed'} (${p.reason}), weighted mean ${mean(p.weightedMean)}`;
    }
    case 'step.retry.scheduled': {
      const p = event.payload;
      return `Step ${p.stepNumber}: ${p.signal} → attempt ${p.nextAttempt} (means ${mean(p.previousMean)} → ${mean(p.lastMean)})`;
    }
    case 'step.passed':
      return `Step ${event.payload.stepNumber} passed on attempt ${event.payload.attempt}`;
    case 'step.failed':
      return `Step ${event.payload.stepNumber} failed after ${event.payload.attempts} attempts (policy ${event.payload.policy})`;
    case 'model.call.completed': {
      const p = event.payload;
      const repair = p.repair > 0 ? `, repair ${p.repair}` : '';
      return `Model call: ${p.role} ${p.phase} on ${p.model}: ${p.promptTokens}+${p.completionTokens} tokens, ${usd(p.costUsd)}, ${Math.round(p.latencyMs)} ms${repair}${p.outcome === 'invalid' ? ' (invalid)' : ''}`;
    }
    case 'role.failed':
      return `${event.payload.role} failed (${event.payload.phase}): ${short(event.payload.error.message)}`;
    case 'request.cancelled':
      return `Request ${event.payload.requestId} (${event.payload.phase}) cancelled: ${short(event.payload.reason)}`;
    case 'result.rejected':
      return `Ignored a ${event.payload.reason} result for ${event.payload.requestId} from ${event.payload.worker}`;
    case 'run.completed':
      return `Run completed: ${short(event.payload.summary)}`;
    case 'run.failed':
      return `Run ended (${event.payload.reason}): ${short(event.payload.message)}`;
  }
}
