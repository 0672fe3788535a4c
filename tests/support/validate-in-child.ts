import { runValidators } from '../../src/tools/validators.js';

/**
 * Runs one validator command on a workspace in a process of its own, as a generator worker of
 * another process would (`tests/tools/workspace-lock.test.ts`): argv is the workspace, then the
 * command. Prints the validator's run as JSON.
 */
const [workspace, command] = process.argv.slice(2);
if (workspace === undefined || command === undefined) throw new Error('usage: <workspace> <command>');
const runs = await runValidators(
  [command],
  { workspace, output: '', runId: 'pge-child', stepId: 'child', stepNumber: 1, attempt: 1 },
  new AbortController().signal,
);
process.stdout.write(JSON.stringify(runs));
