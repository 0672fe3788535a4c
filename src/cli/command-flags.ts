import { type Command, FLAGS, type FlagSpec, MCP_FLAG_ROLES, PLAN_FLAG } from './flag-table.js';

/**
 * The flag table's second half: the flags of single commands (`--inspect` of `run` and `demo`,
 * `--from-step` of `fork`), and the flags each command of the table accepts; the others are
 * declared whole in their own files.
 */

/** `--inspect` of `run` and `demo`: it attaches a viewer and sets no option. */
const INSPECT_FLAG: FlagSpec = {
  name: 'inspect',
  kind: 'switch',
  group: 'output',
  help: "Watch the run live in Stately's inspector (needs internet)",
};

/** `--from-step` of `pge fork`: the step from which the fork calls models. */
const FROM_STEP_FLAG: FlagSpec = {
  name: 'from-step',
  kind: 'integer',
  min: 1,
  value: '<n>',
  group: 'harness',
  help: "The step of the parent's plan (1-based) from which the fork calls models again (required)",
};

/**
 * Flags that shape the plan or the order its steps ran in, which a fork takes from its parent (the
 * events it takes must come again in their order).
 */
const PLAN_FLAGS: readonly string[] = ['max-steps', 'rubric', 'parallel'];

/** The output flags of `resume`: a resumed run keeps its log and its recorded settings. */
const RESUME_OUTPUT_FLAGS: readonly string[] = ['output-type', 'json', 'verbose'];

/**
 * What the acting roles of a resumed run have, which are this process's, as its models are: the
 * log records the tools, validators and workspace its run had, and a resume must be given the
 * same (the working directory is taken from the log unless given); its MCP servers are not
 * recorded, and are given again the same way.
 */
export const RESUME_ACTING_FLAGS: readonly string[] = [
  'validate',
  'no-tools',
  'no-images',
  'working-dir',
  ...Object.keys(MCP_FLAG_ROLES),
];

/** The flags a command accepts, in help order. */
export function flagsFor(command: Command): readonly FlagSpec[] {
  switch (command) {
    case 'run':
      return [...FLAGS, PLAN_FLAG, INSPECT_FLAG];
    case 'demo':
      // The demo's model is built in: flags that configure a model server or a config file do not apply.
      return [
        ...FLAGS.filter((f) => ['harness', 'budget', 'output'].includes(f.group)),
        PLAN_FLAG,
        INSPECT_FLAG,
      ];
    case 'resume':
      // The run's bounds, thresholds and budgets are the log's: only the models, the acting roles'
      // tools and validators, and the output are set here.
      return FLAGS.filter(
        (f) =>
          f.group === 'model' ||
          f.group === 'cli' ||
          f.group === 'nats' ||
          RESUME_OUTPUT_FLAGS.includes(f.name) ||
          RESUME_ACTING_FLAGS.includes(f.name),
      );
    case 'graph':
    case 'replay':
    case 'nats-config':
    case 'config':
    case 'plan':
    case 'batch':
    case 'follow':
    case 'approvals':
    case 'approve':
    case 'cancel':
    case 'runs':
    case 'worker':
    case 'dashboard':
      // Declared whole, with their options, in their own files (graph-command.ts, …).
      return [];
    case 'continue':
      // The plan is the earlier run's, or --plan's edited one; the rubric may be fixed anew.
      return [...FLAGS.filter((f) => f.name !== 'max-steps'), PLAN_FLAG];
    case 'fork':
      // The plan is the parent's: the flags that shape a plan do not apply.
      return [FROM_STEP_FLAG, ...FLAGS.filter((f) => !PLAN_FLAGS.includes(f.name))];
  }
}
