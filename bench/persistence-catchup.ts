import { mkdirSync } from 'node:fs';
import { basename, join } from 'node:path';
import { PlannerGeneratorEvaluator } from '../src/api/planner-generator-evaluator.js';
import { publishEvent } from '../src/bus/channels.js';
import { NatsBus } from '../src/bus/nats-bus.js';
import { readLogFile } from '../src/persistence/index.js';
import { startNatsPersistence } from '../src/runtime/nats-persistence.js';
import type { RunEvent } from '../src/schemas/index.js';
import { InstantModel } from './instant-model.js';
import { startBenchNatsServer } from './nats-deployment.js';

/**
 * Section 8: how fast a restarted persistence worker catches up. On a private nats-server, a
 * persistence actor wired as `pge worker --role persistence` (`startNatsPersistence`) writes the
 * first part of `runs` runs and stops; the rest of every run is published while none runs; a new
 * actor then starts on the same durable consumer and is timed until every log is complete. It
 * joins each run midway, so each run costs one read of its start from PGE_EVENTS besides the
 * backlog itself. The runs are copies of one real run (instant model) under new run ids.
 */

/** Settings of the catch-up section. */
export interface CatchUpSettings {
  /** Root of the temporary logs and pid files. */
  dir: string;
  /** Runs in the backlog. */
  runs: number;
  /** Steps of the recorded run's plan (instant model: each step fails once, then passes). */
  steps: number;
  /** Share of each run's events written before the first persistence actor stops (0 to 1). */
  writtenBefore: number;
}

/** What the section measured. */
export interface CatchUpResults {
  settings: Omit<CatchUpSettings, 'dir'>;
  eventsPerRun: number;
  /** Events published while no persistence actor ran: what the restarted one had to write. */
  backlogEvents: number;
  /** From the restarted actor's start (its connection included) to every log complete and closed. */
  catchUpMs: number;
  /** `backlogEvents` per second of `catchUpMs`. */
  eventsPerSecond: number;
  /** The nats-server's CPU time during the catch-up, in % of one core (null when it cannot be read). */
  serverCpuPercent: number | null;
}

/** The events of one run on the embedded runtime, with the instant model. */
async function recordRun(dir: string, steps: number): Promise<RunEvent[]> {
  const events: RunEvent[] = [];
  const workingDirectory = join(dir, 'catch-up-template');
  mkdirSync(workingDirectory, { recursive: true });
  const model = new InstantModel(steps);
  const pge = new PlannerGeneratorEvaluator({
    plannerAgent: model,
    generatorAgent: model,
    evaluatorAgent: model,
    workingDirectory,
    maxSteps: steps,
    onEvent: (event) => events.push(event),
  });
  await pge.run(`Write a ${steps}-part technical note (persistence catch-up benchmark)`);
  return events;
}

/** `template` as the events of run `runId`: new run id, event ids and log file name. */
function copyRun(template: readonly RunEvent[], runId: string): RunEvent[] {
  return template.map((event) => {
    const copy = { ...event, runId, id: `${runId}-evt-${event.seq}` } as RunEvent;
    if (copy.type === 'run.started') copy.payload = { ...copy.payload, logPath: `${runId}.md` };
    return copy;
  });
}

/** Publishes the events of every run, run after run, and waits until JetStream stored them all. */
async function publishAll(bus: NatsBus, events: readonly RunEvent[]): Promise<void> {
  await Promise.all(events.map((event) => publishEvent(bus, event)));
}

/** Runs the section on a fresh server. */
export async function measurePersistenceCatchUp(settings: CatchUpSettings): Promise<CatchUpResults> {
  const dir = join(settings.dir, 'persistence-catch-up');
  const logs = join(dir, 'logs');
  mkdirSync(logs, { recursive: true });
  const template = await recordRun(dir, settings.steps);
  const runs = Array.from({ length: settings.runs }, (_, i) => copyRun(template, `catch-up-${i + 1}`));
  const cut = Math.max(1, Math.floor(template.length * settings.writtenBefore));
  const server = await startBenchNatsServer(join(dir, 'nats-server.pid'));
  const errors: string[] = [];
  const connect = (name: string) =>
    NatsBus.connect({
      servers: server.url,
      name: `pge-bench-${name}`,
      onHandlerError: (error, subject) => errors.push(`${name} on ${subject}: ${String(error)}`),
    });
  const persistence = async (name: string) => {
    const bus = await connect(name);
    const actor = startNatsPersistence({
      bus,
      resolvePath: (event) => join(logs, basename(event.payload.logPath)),
      onError: (runId, error) => errors.push(`log of ${runId}: ${error.message}`),
      onRejected: (rejection) => errors.push(`rejected ${rejection.subject}: ${rejection.problem}`),
    });
    return {
      bus,
      actor,
      async stop() {
        await actor.close();
        await bus.close();
      },
    };
  };
  try {
    const publisher = await connect('publisher');
    const first = await persistence('persistence-1');
    await publishAll(
      publisher,
      runs.flatMap((events) => events.slice(0, cut)),
    );
    await first.bus.flush(); // the first actor has every event so far on disk
    await first.stop();
    const backlog = runs.flatMap((events) => events.slice(cut));
    await publishAll(publisher, backlog);

    const serverBefore = server.cpuMs();
    const started = performance.now();
    const second = await persistence('persistence-2');
    await second.bus.flush();
    await Promise.all(runs.map((events) => second.actor.flushed(events[0]!.runId)));
    const catchUpMs = performance.now() - started;
    const serverAfter = server.cpuMs();
    await second.stop();
    await publisher.close();

    for (const events of runs) {
      const runId = events[0]!.runId;
      const logged = await readLogFile(join(logs, `${runId}.md`));
      if (logged.length !== events.length || logged.at(-1)?.id !== events.at(-1)?.id)
        errors.push(`log of ${runId}: ${logged.length} of ${events.length} events`);
    }
    if (errors.length > 0) throw new Error(`persistence catch-up: ${errors.join('; ')}`);
    const { dir: _dir, ...rest } = settings;
    return {
      settings: rest,
      eventsPerRun: template.length,
      backlogEvents: backlog.length,
      catchUpMs,
      eventsPerSecond: (backlog.length * 1000) / catchUpMs,
      serverCpuPercent:
        serverBefore === null || serverAfter === null
          ? null
          : ((serverAfter - serverBefore) * 100) / catchUpMs,
    };
  } finally {
    await server.stop();
  }
}

/** The lines of section 8; `table` is the report's table formatter. */
export function catchUpLines(
  results: CatchUpResults | { skipped: string },
  table: (header: readonly string[], rows: readonly (readonly string[])[]) => string,
): string[] {
  if ('skipped' in results) return [`8. Persistence catch-up: skipped (${results.skipped})`, ''];
  const s = results.settings;
  return [
    `8. Persistence catch-up on NATS (a restarted persistence worker over a backlog: ${s.runs} runs of ${results.eventsPerRun}`,
    `   events, ${Math.round(s.writtenBefore * 100)} % of each written before the first worker stopped; one read of each run's start)`,
    table(
      ['runs', 'backlog events', 'catch-up ms', 'events/s', 'server CPU'],
      [
        [
          String(s.runs),
          results.backlogEvents.toLocaleString('en-US'),
          results.catchUpMs.toFixed(0),
          Math.round(results.eventsPerSecond).toLocaleString('en-US'),
          results.serverCpuPercent === null ? '-' : `${results.serverCpuPercent.toFixed(0)} %`,
        ],
      ],
    ),
    '',
  ];
}
