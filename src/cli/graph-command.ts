import type { AnyStateMachine } from 'xstate';
import type { GraphFormat, MachineName } from '../graph/graph-choices.js';
import { ExitCode } from './exit-codes.js';
import type { CommandLine } from './flags.js';
import type { CliIo } from './io.js';

/**
 * `pge graph [--machine session|run|step] [--format mermaid|dot|json]`: prints a statechart, read from
 * the machine definition itself. It calls no model and reads neither the environment nor a
 * config file, so the same command prints the same chart everywhere.
 */

// The machines and xstate's graph utilities load only once the flags are known to be good.
const MACHINES: Record<MachineName, () => Promise<AnyStateMachine>> = {
  session: async () => (await import('../machines/session-machine.js')).sessionMachine,
  run: async () => (await import('../machines/run-machine.js')).runMachine,
  step: async () => (await import('../machines/step-machine.js')).stepMachine,
};

/**
 * `pge graph`: writes the chart to stdout and returns exit code 0. The flag table checks the
 * choices and supplies the defaults; the parser refuses an argument (`ConfigurationError`, exit 2).
 */
export async function graphCommand(line: CommandLine, io: CliIo): Promise<number> {
  const machine = line.flags.values.machine as MachineName;
  const format = line.flags.values.format as GraphFormat;
  const { exportGraph } = await import('../graph/export-graph.js');
  io.stdout.write(exportGraph(await MACHINES[machine](), format));
  return ExitCode.passed;
}
