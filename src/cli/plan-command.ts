import { existsSync, writeFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { Command, Option } from '@commander-js/extra-typings';
import { ConfigurationError } from '../errors.js';
import type { PlanDocument } from '../schemas/index.js';
import { addTableFlags, configFileOption, optionsGiven } from './flag-options.js';
import { FLAG_GROUPS, FLAGS } from './flag-table.js';
import type { CliIo } from './io.js';

/**
 * `pge plan "<task>" [--out plan.json] [--json]`: the planner alone (`PlannerGeneratorEvaluator.plan`),
 * its plan printed for a person to read, and written as a plan document for `pge run --plan`.
 * Declared here whole, as commander takes a command: the flags of a run's options that shape a plan
 * from the flag table (which `run` shares), its own typed, and its action; `program.ts` adds the
 * help's prose.
 */

/** What `pge plan --demo` says first, so that nobody takes the demo model's plan for a model's. */
export const DEMO_PLAN_NOTICE =
  'pge plan: the plan comes from the built-in demo model (scripted templates), not an AI; it needs no API key and sends nothing anywhere.';

/**
 * The run flags `pge plan` takes besides the models': those that shape the plan and the thresholds
 * its rubric gets, and the planner's deadline.
 */
const PLANNING_FLAGS: readonly string[] = [
  'rubric',
  'max-steps',
  'threshold',
  'fallback-threshold',
  'call-timeout',
  'max-task-bytes',
];

const OUTPUT = `${FLAG_GROUPS.output}:`;

/** `pge plan`'s options, declared: the table's, then its own typed. */
function planOptions() {
  const command = new Command('plan').argument('<task...>');
  addTableFlags(
    command,
    FLAGS.filter((f) => f.group === 'model' || PLANNING_FLAGS.includes(f.name)),
  );
  return command
    .addOption(
      new Option(
        '--demo',
        'Plan with the built-in demo model (not an AI): no key needed, nothing sent anywhere',
      ).helpGroup(`${FLAG_GROUPS.model}:`),
    )
    .addOption(
      new Option(
        '--out <file.json>',
        'Write the plan document to this file (an existing file is refused, unless --force)',
      ).helpGroup(OUTPUT),
    )
    .addOption(new Option('--force', 'With --out: replace the file if it exists').helpGroup(OUTPUT))
    .addOption(
      new Option('--json', 'Print the plan document as JSON on stdout instead of as text').helpGroup(OUTPUT),
    )
    .addOption(configFileOption());
}

/** What `pge plan`'s flags say: its own typed, and the options of the run's flags given. */
type PlanFlags = ReturnType<ReturnType<typeof planOptions>['opts']> & {
  options: ReturnType<typeof optionsGiven>;
};

/** `pge plan`, declared: it asks the planner, prints the plan and writes it to `--out`. */
export function planCommand(io: CliIo) {
  return planOptions().action(async (words, flags, parsed) => {
    const task = words.join(' ').trim();
    if (task === '')
      throw new ConfigurationError('pge plan needs a task: pge plan "<task>" [--out plan.json]');
    await plan(task, { ...flags, options: optionsGiven(parsed) }, io);
  });
}

async function plan(task: string, flags: PlanFlags, io: CliIo): Promise<void> {
  // Loaded once the line is known to be good: the help and a usage error load no harness.
  const { PlannerGeneratorEvaluator } = await import('../api/planner-generator-evaluator.js');
  const { DemoModel } = await import('../roles/demo-model.js');
  const { resolveConfig } = await import('./config.js');
  const demo = flags.demo === true;
  // The demo reads neither the environment nor a config file, as `pge demo` does not.
  const config = resolveConfig({
    flags: { options: flags.options, configPath: flags.config ?? null },
    env: io.env,
    cwd: io.cwd,
    flagsOnly: demo,
  });
  const out = flags.out === undefined ? null : resolve(io.cwd, flags.out);
  // Checked before the planner is asked: its answer would be lost, and a call may cost money.
  if (out !== null) checkOut(out, flags.force === true);
  if (demo) io.stderr.write(`${DEMO_PLAN_NOTICE}\n`);
  // Every role's model is built with the harness, though only the planner is asked: the demo's
  // takes every role, so that no key is needed for the others.
  const model = demo ? new DemoModel() : null;
  const pge = new PlannerGeneratorEvaluator({
    ...config.options,
    ...(model ? { plannerAgent: model, generatorAgent: model, evaluatorAgent: model } : {}),
  });
  io.stderr.write(`pge: asking the planner (${pge.modelNames.planner})\n`);
  let doc: PlanDocument;
  try {
    doc = await pge.plan(task);
  } finally {
    await pge.close();
  }
  if (out !== null) {
    const { PLAN_DOCUMENT_SCHEMA_REF } = await import('../schemas/index.js');
    const written = { ...doc, $schema: schemaRefFor(dirname(out), PLAN_DOCUMENT_SCHEMA_REF) };
    // `wx` unless forced: a file that appeared while the planner thought is not replaced either.
    writeFileSync(out, `${JSON.stringify(written, null, 2)}\n`, { flag: flags.force === true ? 'w' : 'wx' });
  }
  io.stdout.write(flags.json ? `${JSON.stringify(doc, null, 2)}\n` : `${planText(doc)}\n`);
  if (out !== null) {
    const shown = relative(io.cwd, out) || out;
    io.stderr.write(
      `pge: plan written to ${shown}; review or edit it, then run it: pge run --plan ${shown}\n`,
    );
  }
}

/** Refuses an `--out` that would replace a file unasked, or whose directory is missing. */
function checkOut(out: string, force: boolean): void {
  if (!existsSync(dirname(out)))
    throw new ConfigurationError(`--out: the directory of ${out} does not exist`);
  if (existsSync(out) && !force)
    throw new ConfigurationError(
      `--out: ${out} already exists; pge plan replaces a file only with --force (or give another --out)`,
    );
}

/**
 * The `$schema` of a plan written in `dir`: `ref`, the shipped schema of the nearest pge installed at or
 * above it, relative to the file, so that an editor finds it wherever in the project the plan is
 * kept; else the default, which holds for a plan at a project's root.
 */
function schemaRefFor(dir: string, ref: string): string {
  for (let at = dir; ; at = dirname(at)) {
    const schema = join(at, ref);
    if (existsSync(schema)) return relative(dir, schema).split(sep).join('/');
    if (dirname(at) === at) return ref;
  }
}

/** A plan document as a person reads it: the task and scope, the numbered steps, the rubric as a table. */
export function planText(doc: PlanDocument): string {
  const lines: string[] = [];
  if (doc.task !== undefined) lines.push(`Task: ${oneLine(doc.task)}`);
  if (doc.scope !== '') lines.push(`Scope: ${doc.scope}`);
  lines.push('', `Steps (${doc.steps.length}):`);
  const number = new Map(doc.steps.map((s, i) => [s.id, i + 1]));
  doc.steps.forEach((step, i) => {
    const after =
      step.dependsOn.length === 0
        ? ''
        : `  (after ${step.dependsOn.map((id) => `${number.get(id)}. ${id}`).join(', ')})`;
    lines.push(`  ${i + 1}. ${step.title} [${step.id}]${after}`);
    lines.push(`     ${step.description}`);
    lines.push(`     delivers: ${step.expectedOutput}`);
  });
  lines.push('', 'Rubric (a step passes when every criterion reaches its threshold):');
  const rows = [
    ['criterion', 'weight', 'threshold', 'description'],
    ...doc.criteria.map((c) => [
      c.name,
      c.weight,
      c.threshold === null ? '-' : String(c.threshold),
      c.description,
    ]),
  ];
  const widths = [0, 1, 2].map((col) => Math.max(...rows.map((row) => row[col]!.length)));
  for (const row of rows)
    lines.push(
      `  ${row.map((cell, col) => (col < 3 ? cell.padEnd(widths[col]!) : cell)).join('  ')}`.trimEnd(),
    );
  return lines.join('\n');
}

const oneLine = (text: string): string => text.replace(/\s+/g, ' ').trim();
