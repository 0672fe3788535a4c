import type { BusFigures, BusOverheadResults } from './nats-overhead.js';
import type { ScalingResults } from './nats-scaling.js';

/** The tables of the NATS sections (5 and 6) and their verdict, for `report.ts`. */

/** What the NATS sections measured, or why they did not run. */
export type NatsResults = { scaling: ScalingResults; busOverhead: BusOverheadResults } | { skipped: string };

/** Target of issue #4 item 10: runs per minute with 4 workers per role over 1 worker. */
export const SCALING_TARGET = { workersPerRole: 4, ratio: 3.5 } as const;

const fixed = (n: number, digits = 1): string => n.toFixed(digits);
const int = (n: number): string => Math.round(n).toLocaleString('en-US');
const percent = (share: number): string => `${fixed(share * 100, 0)} %`;

/** The scaling verdict: W = 4 over W = 1, against the target; null when the section did not run. */
export function scalingVerdict(nats: NatsResults) {
  if ('skipped' in nats) return null;
  const measured =
    nats.scaling.ratios.find((r) => r.workersPerRole === SCALING_TARGET.workersPerRole)?.ratio ?? Number.NaN;
  return { target: SCALING_TARGET.ratio, measured, pass: measured >= SCALING_TARGET.ratio };
}

/** The lines of sections 5 and 6; `table` is the report's table formatter. */
export function natsReportLines(
  nats: NatsResults,
  table: (header: readonly string[], rows: readonly (readonly string[])[]) => string,
): string[] {
  if ('skipped' in nats) return [`5-6. NATS: skipped (${nats.skipped})`, ''];
  const { scaling, busOverhead: bus } = nats;
  const s = scaling.settings;
  const out: string[] = [];
  out.push(
    `5. Scaling on NATS (one process, private nats-server; model answers DemoModel's answer after ${s.modelDelayMs} ms;`,
  );
  out.push(
    `   ${s.maxSteps}-step plans, maxRetriesPerStep ${s.maxRetriesPerStep}; ${s.runsPerWorker} runs in flight per worker; ${fixed(s.warmupMs / 1000, 0)} s warm-up, ${fixed(s.windowMs / 1000, 0)} s window)`,
  );
  out.push(
    '   runs/min = model calls answered in the window ÷ calls per run; closed = runs that ended in it',
  );
  out.push(
    table(
      [
        'workers/role',
        'runs in flight',
        'runs/min',
        '× W=1',
        'closed',
        'calls',
        'busy gen/eval',
        'mean run s',
        'node CPU',
        'server CPU',
        'log backlog',
      ],
      scaling.configurations.map((c, i) => [
        String(c.workersPerRole),
        String(c.runsInFlight),
        fixed(c.runsPerMinute),
        fixed(scaling.ratios[i]?.ratio ?? Number.NaN, 2),
        int(c.runsCompleted),
        int(c.modelCalls),
        `${percent(c.busy.generator)} / ${percent(c.busy.evaluator)}`,
        fixed(c.meanRunMs / 1000, 2),
        `${fixed(c.processCpuPercent, 0)} %`,
        c.serverCpuPercent === null ? '-' : `${fixed(c.serverCpuPercent, 0)} %`,
        c.persistenceBacklog === null ? '-' : int(c.persistenceBacklog),
      ]),
    ),
  );
  const verdict = scalingVerdict(nats);
  if (verdict) {
    out.push(
      `target ≥ ${SCALING_TARGET.ratio}× from 1 to ${SCALING_TARGET.workersPerRole} workers per role: ${verdict.pass ? 'PASS' : 'FAIL'} (${fixed(verdict.measured, 2)}×)`,
    );
  }
  out.push('');
  const b = bus.settings;
  out.push(
    `6. Bus overhead per model call, NATS vs in process (instant model; ${b.steps}-step plans, ${1 + 6 * b.steps} calls per run;`,
  );
  out.push(
    `   sequential runs; median of ${b.reps} batches of ${b.runs} runs after ${b.warmupRuns}; services: one worker per role, concurrency ${b.workerConcurrency})`,
  );
  const row = (name: string, f: BusFigures) => [
    name,
    int(f.calls),
    fixed(f.wallMs, 0),
    fixed(f.modelMs, 0),
    fixed(f.usPerCall),
    fixed(f.cpuUsPerCall),
    f.serverCpuUsPerCall === null ? '-' : fixed(f.serverCpuUsPerCall),
    int(f.callsPerSecond),
  ];
  out.push(
    table(
      [
        'set-up',
        'calls',
        'wall ms',
        'model ms',
        'net µs/call',
        'CPU µs/call',
        'server CPU µs/call',
        'calls/s',
      ],
      [
        row('embedded runtime (public API)', bus.embedded),
        row('services, in-process bus', bus.servicesInProcess),
        row('services, NATS', bus.servicesNats),
      ],
    ),
  );
  out.push(
    `NATS / in process (net µs per call): ${fixed(bus.natsOverEmbedded, 2)}× the embedded runtime, ${fixed(bus.natsOverServicesInProcess, 2)}× the same services on the in-process bus`,
  );
  out.push('');
  return out;
}
