import { readFileSync } from 'node:fs';
import type { z } from 'zod';
import { ConfigurationError } from '../errors.js';
import { readLog } from '../persistence/log-reader.js';
import { LOG_TITLE } from '../persistence/markdown-log.js';
import { documentOfPlan, type GivenPlan, PlanDocument } from '../schemas/index.js';

/**
 * Plans as files: reading a plan document (`pge run --plan plan.json`, the `plan` option) or the
 * latest plan of a pge log (a replan's is there as a plan document), with every fault named by the
 * file and the field it is in.
 */

/** `steps[2].dependsOn`: a field of a document as a person writes it. */
function fieldOf(path: readonly PropertyKey[]): string {
  let out = '';
  for (const key of path)
    out += typeof key === 'number' ? `[${key}]` : `${out === '' ? '' : '.'}${String(key)}`;
  return out;
}

/** The first fault of a document, as `<source>: <field>: <message>`. */
function faultOf(source: string, error: z.ZodError): string {
  const issue = error.issues[0]!;
  const where = fieldOf(issue.path);
  const message =
    issue.code === 'unrecognized_keys'
      ? `unknown field${issue.keys.length > 1 ? 's' : ''} ${issue.keys.map((k) => `"${k}"`).join(', ')}`
      : issue.message;
  return `${source}: ${where === '' ? '' : `${where}: `}${message}`;
}

/** Checks a plan document given as a value; throws `ConfigurationError` naming `source` and the field at fault. */
export function checkPlanDocument(value: unknown, source: string): PlanDocument {
  const parsed = PlanDocument.safeParse(value);
  if (!parsed.success) throw new ConfigurationError(faultOf(source, parsed.error));
  return parsed.data;
}

/**
 * The plan a file holds: a plan document (JSON), or a pge log, whose latest plan is taken (the
 * plan of its last replan, if it had one). Throws `ConfigurationError` naming the file, and the
 * field at fault.
 */
export function readPlanFile(path: string): GivenPlan {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (cause) {
    throw new ConfigurationError(
      `cannot read the plan ${path}: ${(cause as NodeJS.ErrnoException).code ?? cause}`,
      {
        cause,
      },
    );
  }
  if (text.startsWith(LOG_TITLE)) return { document: latestPlanOfLog(text, path), file: path };
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (cause) {
    throw new ConfigurationError(`${path}: not JSON: ${(cause as Error).message}`, { cause });
  }
  return { document: checkPlanDocument(json, path), file: path };
}

/** The latest plan a log holds, as a document with the thresholds the run enforced and the run's task. */
function latestPlanOfLog(text: string, path: string): PlanDocument {
  let events: ReturnType<typeof readLog>;
  try {
    events = readLog(text, path);
  } catch (cause) {
    throw new ConfigurationError(`${path}: ${(cause as Error).message}`, { cause });
  }
  const started = events[0]?.type === 'run.started' ? events[0] : undefined;
  const plan = events.findLast((e) => e.type === 'plan.created');
  if (plan?.type !== 'plan.created') throw new ConfigurationError(`${path}: the run it logs made no plan`);
  return documentOfPlan(plan.payload.plan, {
    criteria: plan.payload.criteria,
    ...(started === undefined ? {} : { task: started.payload.task }),
  });
}

/**
 * The `plan` option's value as a run takes it: a path (read by `readPlanFile`), a plan document
 * (from no file), or a plan already read (`{ document, file }`).
 */
export function givenPlanOf(value: unknown): GivenPlan {
  if (typeof value === 'string') return readPlanFile(value);
  if (typeof value === 'object' && value !== null && 'document' in value) {
    const { document, file } = value as { document: unknown; file?: unknown };
    return {
      document: checkPlanDocument(document, typeof file === 'string' ? file : 'plan'),
      file: typeof file === 'string' ? file : null,
    };
  }
  return { document: checkPlanDocument(value, 'plan'), file: null };
}
