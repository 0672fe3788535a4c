import { Command, Option } from '@commander-js/extra-typings';
import type { AnyStateMachine } from 'xstate';
import { GRAPH_FORMATS, MACHINE_NAMES, type MachineName } from '../graph/graph-choices.js';
import type { CliIo } from './io.js';

/**
 * `pge graph [--machine session|run|step] [--format mermaid|dot|json]`: prints a statechart, read from
 * the machine definition itself. It calls no model and reads neither the environment nor a
 * config file, so the same command prints the same chart everywhere. Declared here whole, as
 * commander takes a command: its typed options and its action; `program.ts` adds the help's prose
 * and layout, as to every command.
 */

// The machines and xstate's graph utilities load only once the flags are known to be good.
const MACHINES: Record<MachineName, () => Promise<AnyStateMachine>> = {
  session: async () => (await import('../machines/session-machine.js')).sessionMachine,
  run: async () => (await import('../machines/run-machine.js')).runMachine,
  step: async () => (await import('../machines/step-machine.js')).stepMachine,
};

/** `pge graph`, declared: it writes the chart to `io.stdout`; commander refuses an argument. */
export function graphCommand(io: CliIo) {
  return new Command('graph')
    .addOption(
      new Option(
        '--machine <name>',
        'The chart of the session around a run, of a whole run, or of one step of the plan',
      )
        .choices(MACHINE_NAMES)
        .default('run' as const)
        .helpGroup('Output:'),
    )
    .addOption(
      new Option('--format <format>', 'Mermaid stateDiagram-v2, Graphviz DOT or JSON')
        .choices(GRAPH_FORMATS)
        .default('mermaid' as const)
        .helpGroup('Output:'),
    )
    .action(async ({ machine, format }) => {
      const { exportGraph } = await import('../graph/export-graph.js');
      io.stdout.write(exportGraph(await MACHINES[machine](), format));
    });
}
