import type { PgeOptions } from '../api/options.js';
import type { RunOutput } from '../api/output.js';
import type { PlannerGeneratorEvaluator } from '../api/planner-generator-evaluator.js';
import { ConfigurationError } from '../errors.js';
import { DemoModel, titledDeliverable } from '../roles/demo-model.js';
import type { GivenPlan } from '../schemas/index.js';
import type { CommandLine } from './command-line.js';
import { resolveConfig } from './config.js';
import { DEMO_TASK } from './defaults.js';
import { ExitCode, errorMessage, exitCodeOfError, exitCodeOfResult } from './exit-codes.js';
import type { Command } from './flag-table.js';
import { helpHint } from './help.js';
import type { CliIo } from './io.js';
import { natsOptionsOf } from './nats-options.js';
import { printResult } from './run-report.js';
import { type Session, withSession } from './session.js';

/** `pge run` and `pge demo`: one task, its progress on stderr, its result on stdout (`pge resume` reports as they do). */

/** What `pge demo` says before anything else, so nobody mistakes its output for a model's. */
export const DEMO_NOTICE =
  'pge demo: this run uses a built-in demo model (scripted templates), not an AI. ' +
  'It needs no API key and sends nothing anywhere; the scores are scripted to show a refine and a pivot.';

/** Runs one task and prints its result; returns the exit code. */
async function runTask(
  command: 'run' | 'demo',
  task: string,
  options: PgeOptions,
  json: boolean,
  io: CliIo,
  inspect = false,
): Promise<number> {
  if (!inspect) return runTaskWith(command, task, options, json, io);
  return withInspector(io, (attach) => runTaskWith(command, task, options, json, io, attach));
}

/**
 * `--inspect`: serves the bridge to Stately's inspector on 127.0.0.1, prints its URL, and starts
 * the run once an inspector has connected, so that the run is seen from its first state (a demo
 * run is over in well under a second). A signal while waiting quits with 130.
 */
async function withInspector(
  io: CliIo,
  work: (attach: (pge: PlannerGeneratorEvaluator) => void) => Promise<number>,
): Promise<number> {
  const { startInspectorBridge } = await import('../dashboard/inspector-bridge.js');
  const bridge = await startInspectorBridge();
  try {
    io.stderr.write(
      `pge: inspector at ${bridge.url}: open it in a browser; the run starts when it has connected ` +
        "(the page loads Stately's inspector from stately.ai, so it needs internet; Ctrl-C to give up)\n",
    );
    let onSignal: () => void = () => {};
    const signalled = new Promise<'signal'>((resolve) => {
      onSignal = () => resolve('signal');
      process.once('SIGINT', onSignal);
      process.once('SIGTERM', onSignal);
    });
    const outcome = await Promise.race([bridge.connected.then(() => 'connected' as const), signalled]);
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    if (outcome === 'signal') return ExitCode.interrupted;
    io.stderr.write('pge: inspector connected\n');
    return await work((pge) => pge.attachInspector(bridge.inspect));
  } finally {
    await bridge.close();
  }
}

/** `runTask` once the inspector, if any, is ready; `attach` hands it to the harness. */
async function runTaskWith(
  command: 'run' | 'demo',
  task: string,
  options: PgeOptions,
  json: boolean,
  io: CliIo,
  attach?: (pge: PlannerGeneratorEvaluator) => void,
): Promise<number> {
  return reportRun(command, options, json, io, (session) => {
    attach?.(session.pge);
    return session.pge.run(task);
  });
}

/**
 * Runs `start` in a session and reports it: progress on stderr, the output and summary (or the
 * result as JSON) on stdout; returns the exit code. A run that failed still says where its log is.
 */
export async function reportRun(
  command: Command,
  options: PgeOptions,
  json: boolean,
  io: CliIo,
  start: (session: Session) => Promise<RunOutput>,
): Promise<number> {
  return withSession(options, io, async (session) => {
    const { pge, progress, interrupted } = session;
    let output: RunOutput;
    try {
      output = await start(session);
    } catch (error) {
      progress.stop();
      const code = exitCodeOfError(error);
      io.stderr.write(`pge: ${errorMessage(error)}\n`);
      if (code === ExitCode.usage) io.stderr.write(`${helpHint(command)}\n`);
      // A run that started has a log, and a result that says how far it got.
      const result = pge.lastResult;
      if (result) io.stderr.write(`pge: the log of the run is at ${result.outputPath}\n`);
      if (json && result) io.stdout.write(`${JSON.stringify(result, null, 2)}\n`);
      return interrupted() ? ExitCode.interrupted : code;
    }
    progress.stop();
    const result = pge.lastResult!;
    printResult(result, output, options.outputType, json, io);
    return exitCodeOfResult(result, interrupted());
  });
}

/**
 * The task of a command line: its positionals, else the task of the plan it runs (`--plan`), else
 * `fallback`; none is a `ConfigurationError` that says how to give one.
 */
function taskOf(line: CommandLine, options: PgeOptions, fallback?: string): string {
  const given = options.plan as GivenPlan | null | undefined;
  const task = line.positionals.join(' ').trim() || given?.document.task || fallback;
  if (task !== undefined) return task;
  if (given)
    throw new ConfigurationError(
      `pge run needs a task: the plan ${given.file ?? 'given'} has none ("task"), so give it: pge run "<task>" --plan <file>`,
    );
  throw new ConfigurationError(
    'pge run needs a task: pge run "<task>", or a plan with one: pge run --plan <file>',
  );
}

/** `pge run "<task>" [flags]`, `pge run --plan <file> ["<task>"] [flags]`. */
export async function runCommand(line: CommandLine, io: CliIo): Promise<number> {
  const inspect = line.flags.values.inspect === true;
  const config = resolveConfig({ flags: line.flags, env: io.env, cwd: io.cwd });
  const task = taskOf(line, config.options);
  const nats = line.flags.nats ?? io.env.NATS_URL?.trim();
  if (nats) {
    if (inspect)
      throw new ConfigurationError(
        '--inspect needs the run in this process: it cannot inspect a run on NATS',
      );
    const { refuseWorkerFlags, remoteRun } = await import('./remote-run.js');
    // Models, validators, tools and logs are the workers' (a client's command would run on their machines).
    refuseWorkerFlags(line.flags.options);
    return remoteRun(task, nats, natsOptionsOf(line.flags, io.env), config.options, line.flags.json, io);
  }
  return runTask('run', task, config.options, line.flags.json, io, inspect);
}

/** `pge demo ["<task>"] [flags]`: the whole loop, offline, with `DemoModel` in every role. */
export async function demoCommand(line: CommandLine, io: CliIo): Promise<number> {
  const config = resolveConfig({ flags: line.flags, env: io.env, cwd: io.cwd, flagsOnly: true });
  io.stderr.write(`${DEMO_NOTICE}\n`);
  const model = new DemoModel();
  const task = taskOf(line, config.options, DEMO_TASK);
  const options = {
    ...config.options,
    plannerAgent: model,
    generatorAgent: model,
    evaluatorAgent: model,
    // The demo shows a validator at work unless it was given its own.
    validators: config.options.validators?.length ? config.options.validators : [titledDeliverable],
  };
  return runTask('demo', task, options, line.flags.json, io, line.flags.values.inspect === true);
}
