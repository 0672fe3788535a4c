import { type ParseArgsConfig, parseArgs } from 'node:util';
import type { AnyStateMachine } from 'xstate';
import { ConfigurationError } from '../errors.js';
import type { GraphFormat, MachineName } from '../graph/graph-choices.js';
import { ExitCode } from './exit-codes.js';
import { commandHelp, GRAPH_FLAGS } from './help.js';
import type { CliIo } from './io.js';

/**
 * `pge graph [--machine run|step] [--format mermaid|dot|json]`: prints a statechart, read from
 * the machine definition itself. It calls no model and reads neither the environment nor a
 * config file, so the same command prints the same chart everywhere.
 */

// The machines and xstate's graph utilities load only once the flags are known to be good.
const MACHINES: Record<MachineName, () => Promise<AnyStateMachine>> = {
  run: async () => (await import('../machines/run-machine.js')).runMachine,
  step: async () => (await import('../machines/step-machine.js')).stepMachine,
};

const DEFAULTS = { machine: 'run', format: 'mermaid' } as const satisfies {
  machine: MachineName;
  format: GraphFormat;
};

/** A choice flag's value, checked against the choices `GRAPH_FLAGS` documents. */
function choice(name: keyof typeof DEFAULTS, raw: string | undefined): string {
  if (raw === undefined) return DEFAULTS[name];
  const choices = GRAPH_FLAGS.find((f) => f.name === name)?.choices ?? [];
  if (!choices.includes(raw))
    throw new ConfigurationError(`--${name} expects one of ${choices.join(', ')}, got "${raw}"`);
  return raw;
}

/**
 * `pge graph`: writes the chart to stdout and returns exit code 0. Unknown flags throw
 * `parseArgs`'s errors, bad values and arguments `ConfigurationError` (exit code 2).
 */
export async function graphCommand(argv: readonly string[], io: CliIo): Promise<number> {
  const options: NonNullable<ParseArgsConfig['options']> = { help: { type: 'boolean', short: 'h' } };
  for (const f of GRAPH_FLAGS) options[f.name] = { type: 'string' };
  const { values, positionals } = parseArgs({
    args: [...argv],
    options,
    allowPositionals: true,
    strict: true,
  });
  if (values.help === true) {
    io.stdout.write(`${commandHelp('graph')}\n`);
    return ExitCode.passed;
  }
  if (positionals.length > 0)
    throw new ConfigurationError(`pge graph takes no arguments, got "${positionals.join(' ')}"`);
  const machine = choice('machine', values.machine as string | undefined) as MachineName;
  const format = choice('format', values.format as string | undefined) as GraphFormat;
  const { exportGraph } = await import('../graph/export-graph.js');
  io.stdout.write(exportGraph(await MACHINES[machine](), format));
  return ExitCode.passed;
}
