import type { ResolvedOptions } from './options.js';
import type { HarnessResult } from './result.js';

/** The `yaml` module; `typeof import` keeps it a type, so that only `loadYaml` loads it. */
type Yaml = typeof import('yaml');
let yaml: Promise<Yaml> | undefined;

/** `yaml`, loaded the first time a run asks for YAML output rather than with the library. */
function loadYaml(): Promise<Yaml> {
  yaml ??= import('yaml');
  return yaml;
}

/**
 * `outputType`: what `run` returns, as the reference's history formatter does, from a transcript
 * of the run (`dict`, `list`, `str`, `json`, `yaml`) — except `final`, which returns the final
 * artifact rather than the summary line.
 */

/** One transcript message, with the reference's role names. */
export interface TranscriptMessage {
  role: string;
  content: string;
}

/** The run as a conversation: task, plan, contracts, outputs, evaluations, summary. */
export function transcript(task: string, result: HarnessResult): TranscriptMessage[] {
  const messages: TranscriptMessage[] = [{ role: 'User', content: task }];
  if (result.plan) {
    const steps = result.plan.steps.map((s, i) => `Step ${i + 1}: ${s.title} — ${s.description}`).join('\n');
    const criteria = result.criteria
      .map((c) => `${c.name} (${c.weight}, threshold ${c.threshold})`)
      .join(', ');
    messages.push({ role: 'PGE-Planner', content: `${result.plan.scope}\n${steps}\nCriteria: ${criteria}` });
  }
  for (const step of result.stepLogs) {
    const n = step.stepNumber;
    for (const round of step.contractRounds) {
      messages.push({
        role: 'PGE-Generator',
        content: `[Step ${n} Contract] ${JSON.stringify(round.proposal)}`,
      });
      if (round.review)
        messages.push({
          role: 'PGE-Evaluator',
          content: `[Step ${n} Contract Review] ${JSON.stringify(round.review)}`,
        });
    }
    for (const a of step.attempts) {
      messages.push({
        role: 'PGE-Generator',
        content: `[Step ${n} Output (attempt ${a.attempt})] ${a.output ?? `(invalid: ${a.problem})`}`,
      });
      const scores = a.scores.map((s) => `${s.criterion} ${s.score ?? '-'}/${s.threshold}`).join(', ');
      messages.push({
        role: 'PGE-Evaluator',
        content: `[Step ${n} Evaluation] ${a.verdict.toUpperCase()} (${a.reason}): ${scores}`,
      });
    }
    messages.push({
      role: 'System',
      content: `--- Step ${n}/${result.totalSteps} ${step.passed ? 'PASSED' : 'FAILED'} ---`,
    });
  }
  messages.push({ role: 'System', content: result.summary });
  return messages;
}

/** An `outputType`, as the options schema defines it. */
export type OutputType = ResolvedOptions['outputType'];

/**
 * What `run` returns for the output type `T`: the transcript's messages for `dict`, its lines for
 * `list`, one string for the others. Without `T`, any of them.
 */
export type RunOutput<T extends OutputType = OutputType> = {
  dict: TranscriptMessage[];
  list: string[];
  str: string;
  final: string;
  json: string;
  yaml: string;
}[T];

const lines = (messages: TranscriptMessage[]) => messages.map((m) => `${m.role}: ${m.content}`);

/** One formatter per output type; a new output type in the options schema fails to compile here. */
const FORMATS: {
  [T in OutputType]: (task: string, result: HarnessResult) => RunOutput<T> | Promise<RunOutput<T>>;
} = {
  final: (_task, result) => result.finalArtifact,
  dict: (task, result) => transcript(task, result),
  list: (task, result) => lines(transcript(task, result)),
  str: (task, result) => lines(transcript(task, result)).join('\n\n'),
  json: (task, result) => JSON.stringify(transcript(task, result), null, 2),
  yaml: async (task, result) => (await loadYaml()).stringify(transcript(task, result)),
};

/** Formats a finished run for `outputType`. */
export async function formatOutput<T extends OutputType>(
  outputType: T,
  task: string,
  result: HarnessResult,
): Promise<RunOutput<T>> {
  return FORMATS[outputType](task, result);
}
