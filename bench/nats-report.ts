import type { RoundTripFigures } from './nats-floor.js';
import type { BusFigures, BusOverheadResults } from './nats-overhead.js';
import type { ScalingResults } from './nats-scaling.js';

/** The tables of the NATS sections (5 and 6) and their verdict, for `report.ts`. */

/**
 * The headline figures of the NATS path (issue #14), each taken from sections 5-6 of the same run:
 * what a model call costs pge on NATS beside the floor measured on the same server.
 */
export interface NatsSummary {
  /** pge's services on NATS, wall time per model call net of the model's (section 6). */
  perCallNetUs: number;
  /** Floor: work published, pulled, result published and delivered on a core subscription (median). */
  floorWorkRoundTripUs: number;
  /** The same round trip with the result read by an ordered consumer, as pge's coordinator reads it. */
  floorOrderedWorkRoundTripUs: number;
  /**
   * The fenced floor: the events a call records before its request stored one after another, then
   * the request on the same stream, pulled from there, and the result on a core subscription
   * (median). The least a call costs with pge's guarantees on this server.
   */
  floorFencedWorkRoundTripUs: number;
  /** The fenced floor with the request sent twice, as pge sends it: an event, then a work item. */
  floorFencedTwiceWorkRoundTripUs: number;
  /** Core request/reply of 128 bytes (median). */
  coreRequestReplyUs: number;
  /** `perCallNetUs` ÷ `floorWorkRoundTripUs`. */
  perCallOverFloor: number;
  /** `perCallNetUs` ÷ `floorOrderedWorkRoundTripUs`. */
  perCallOverOrderedFloor: number;
  /** `perCallNetUs` ÷ `floorFencedWorkRoundTripUs`. */
  perCallOverFencedFloor: number;
  /** `floorFencedWorkRoundTripUs` ÷ `floorWorkRoundTripUs`: the least `perCallOverFloor` can be. */
  fencedFloorOverFloor: number;
  /** `floorFencedTwiceWorkRoundTripUs` ÷ `floorFencedWorkRoundTripUs`: what the second send costs. */
  requestTwiceOverOnce: number;
  /** Messages clients sent into the server per model call (`/varz` in_msgs). */
  serverMessagesPerCall: number;
  /** Messages the server sent out to clients per model call (`/varz` out_msgs). */
  serverMessagesOutPerCall: number;
  serverBytesInPerCall: number;
  serverBytesOutPerCall: number;
  /** The floor's messages into / out of the server per round trip (core delivery). */
  floorServerMessages: { in: number; out: number };
  /** CPU of the process holding every service, net of the model's time, per model call. */
  processCpuUsPerCall: number;
  /** CPU of the nats-server per model call (null when it cannot be read). */
  serverCpuUsPerCall: number | null;
  /** The floor's CPU per round trip (core delivery): the process (both ends) and the server. */
  floorCpuUs: { process: number; server: number | null };
  /** Runs per minute with 8 workers per role ÷ with 1 (null when 8 was not measured). */
  scaling8: number | null;
  /** Runs per minute by workers per role (section 5). */
  runsPerMinute: Record<string, number>;
  /**
   * The same services on a three-server cluster with 3 replicas beside one server (section 6):
   * net µs per call, its ratio to one server's, and the sequential runs per minute of each.
   */
  cluster: {
    perCallNetUs: number;
    perCallOverSingle: number;
    runsPerMinute: number;
    singleRunsPerMinute: number;
    serverCpuUsPerCall: number | null;
  };
}

/** What the NATS sections measured, or why they did not run. */
export type NatsResults =
  | (NatsSummary & { scaling: ScalingResults; busOverhead: BusOverheadResults })
  | { skipped: string };

/** The headline figures of sections 5 and 6. */
export function natsSummary(scaling: ScalingResults, bus: BusOverheadResults): NatsSummary {
  const nats = bus.servicesNats;
  const { floor } = bus;
  const perCall = nats.traffic?.perCall;
  return {
    perCallNetUs: nats.usPerCall,
    floorWorkRoundTripUs: floor.work.medianUs,
    floorOrderedWorkRoundTripUs: floor.workOrdered.medianUs,
    floorFencedWorkRoundTripUs: floor.workFenced.medianUs,
    floorFencedTwiceWorkRoundTripUs: floor.workFencedTwice.medianUs,
    coreRequestReplyUs: floor.coreRequestReply.medianUs,
    perCallOverFloor: nats.usPerCall / floor.work.medianUs,
    perCallOverOrderedFloor: nats.usPerCall / floor.workOrdered.medianUs,
    perCallOverFencedFloor: nats.usPerCall / floor.workFenced.medianUs,
    fencedFloorOverFloor: floor.workFenced.medianUs / floor.work.medianUs,
    requestTwiceOverOnce: floor.workFencedTwice.medianUs / floor.workFenced.medianUs,
    serverMessagesPerCall: perCall?.inMsgs ?? Number.NaN,
    serverMessagesOutPerCall: perCall?.outMsgs ?? Number.NaN,
    serverBytesInPerCall: perCall?.inBytes ?? Number.NaN,
    serverBytesOutPerCall: perCall?.outBytes ?? Number.NaN,
    floorServerMessages: { in: floor.work.server.inMsgs, out: floor.work.server.outMsgs },
    processCpuUsPerCall: nats.cpuUsPerCall,
    serverCpuUsPerCall: nats.serverCpuUsPerCall,
    floorCpuUs: { process: floor.work.processCpuUs, server: floor.work.serverCpuUs },
    scaling8: scaling.ratios.find((r) => r.workersPerRole === 8)?.ratio ?? null,
    runsPerMinute: Object.fromEntries(scaling.configurations.map((c) => [c.workersPerRole, c.runsPerMinute])),
    cluster: {
      perCallNetUs: bus.servicesNatsCluster.usPerCall,
      perCallOverSingle: bus.clusterOverSingle,
      runsPerMinute: sequentialRunsPerMinute(bus.servicesNatsCluster),
      singleRunsPerMinute: sequentialRunsPerMinute(nats),
      serverCpuUsPerCall: bus.servicesNatsCluster.serverCpuUsPerCall,
    },
  };
}

/** Runs per minute of a batch of sequential runs (one at a time, wall time model included). */
function sequentialRunsPerMinute(figures: BusFigures): number {
  return (figures.runs * 60_000) / figures.wallMs;
}

/** Target of issue #4 item 10: runs per minute with 4 workers per role over 1 worker. */
export const SCALING_TARGET = { workersPerRole: 4, ratio: 3.5 } as const;

const fixed = (n: number, digits = 1): string => n.toFixed(digits);
/** A verdict as the reports print it. */
export const verdict = (ok: boolean): string => (ok ? 'PASS' : 'FAIL');
const int = (n: number): string => Math.round(n).toLocaleString('en-US');
const percent = (share: number): string => `${fixed(share * 100, 0)} %`;

/**
 * The scaling verdict: W = 4 over W = 1, against the target; null when the section did not run or
 * did not measure W = 4 (`--workers`).
 */
export function scalingVerdict(nats: NatsResults) {
  if ('skipped' in nats) return null;
  const measured = nats.scaling.ratios.find((r) => r.workersPerRole === SCALING_TARGET.workersPerRole)?.ratio;
  if (measured === undefined) return null;
  return { target: SCALING_TARGET.ratio, measured, pass: measured >= SCALING_TARGET.ratio };
}

/** Targets of issue #14, each a ratio or a count taken in one run. */
export const NATS_PATH_TARGETS = { perCallOverFloor: 2, serverMessagesPerCall: 8, scaling8: 7.5 } as const;

/** Issue #14's verdicts, each taken in one run: per call over the floor, messages in, scaling at 8. */
function pathVerdicts(nats: NatsSummary) {
  const T = NATS_PATH_TARGETS;
  return {
    natsPerCallOverFloor: {
      target: T.perCallOverFloor,
      measured: nats.perCallOverFloor,
      // The fenced floor's ratio: what the guarantees' own messages take of the target (section 6b).
      leastWithGuarantees: nats.fencedFloorOverFloor,
      pass: nats.perCallOverFloor <= T.perCallOverFloor,
    },
    natsServerMessagesPerCall: {
      target: T.serverMessagesPerCall,
      measured: nats.serverMessagesPerCall,
      pass: nats.serverMessagesPerCall <= T.serverMessagesPerCall,
    },
    natsScaling8:
      nats.scaling8 === null
        ? null
        : { target: T.scaling8, measured: nats.scaling8, pass: nats.scaling8 >= T.scaling8 },
  };
}

/**
 * The verdicts of the NATS sections: issue #4's scaling and issue #14's (`pathVerdicts`). Each is
 * null when the sections did not run, and a scaling verdict when its workers per role were not
 * measured (`--workers`).
 */
export function natsVerdicts(nats: NatsResults) {
  if ('skipped' in nats)
    return {
      natsScaling: null,
      natsPerCallOverFloor: null,
      natsServerMessagesPerCall: null,
      natsScaling8: null,
    };
  return { natsScaling: scalingVerdict(nats), ...pathVerdicts(nats) };
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
  const scaling4 = scalingVerdict(nats);
  if (scaling4) {
    out.push(
      `target ≥ ${SCALING_TARGET.ratio}× from 1 to ${SCALING_TARGET.workersPerRole} workers per role: ${verdict(scaling4.pass)} (${fixed(scaling4.measured, 2)}×)`,
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
        row('services, NATS cluster of 3, R3', bus.servicesNatsCluster),
      ],
    ),
  );
  out.push(
    `cluster of 3 with 3 replicas / one server (net µs per call): ${fixed(bus.clusterOverSingle, 2)}×; sequential runs/min ${fixed(nats.cluster.runsPerMinute)} on the cluster, ${fixed(nats.cluster.singleRunsPerMinute)} on one server`,
  );
  out.push(
    `NATS / in process (net µs per call): ${fixed(bus.natsOverEmbedded, 2)}× the embedded runtime, ${fixed(bus.natsOverServicesInProcess, 2)}× the same services on the in-process bus`,
  );
  out.push('');
  out.push(...floorLines(nats, table));
  return out;
}

/** The floor beside pge's call, and what crossed the server per call, by connection. */
function floorLines(
  nats: Exclude<NatsResults, { skipped: string }>,
  table: (header: readonly string[], rows: readonly (readonly string[])[]) => string,
): string[] {
  const { floor } = nats.busOverhead;
  const f = floor.settings;
  const out: string[] = [];
  out.push(
    `6b. The floor on the same server (same client and connection options, streams and consumer configured as pge's;`,
  );
  out.push(
    `    work item ${int(floor.payloadBytes.work)} B and result ${int(floor.payloadBytes.result)} B as pge stored them; sequential, median of ${int(f.iterations)} after ${int(f.warmup)})`,
  );
  const cpu = (us: number | null) => (us === null ? '-' : fixed(us));
  const row = (name: string, r: RoundTripFigures) => [
    name,
    fixed(r.medianUs),
    `${fixed(r.p10Us)}–${fixed(r.p90Us)}`,
    `${fixed(r.server.inMsgs, 2)} / ${fixed(r.server.outMsgs, 2)}`,
    `${int(r.server.inBytes)} / ${int(r.server.outBytes)}`,
    fixed(r.processCpuUs),
    cpu(r.serverCpuUs),
  ];
  const traffic = nats.busOverhead.servicesNats.traffic?.perCall;
  out.push(
    table(
      [
        'per model call / round trip',
        'µs',
        'p10–p90',
        'msgs in / out',
        'bytes in / out',
        'CPU µs',
        'server CPU µs',
      ],
      [
        [
          'pge services on NATS (net of model)',
          fixed(nats.perCallNetUs),
          '-',
          traffic ? `${fixed(traffic.inMsgs, 2)} / ${fixed(traffic.outMsgs, 2)}` : '-',
          traffic ? `${int(traffic.inBytes)} / ${int(traffic.outBytes)}` : '-',
          fixed(nats.processCpuUsPerCall),
          cpu(nats.serverCpuUsPerCall),
        ],
        row('floor: work round trip, core delivery', floor.work),
        row('floor: work round trip, ordered consumer', floor.workOrdered),
        row(
          `fenced floor: ${floor.payloadBytes.eventsBefore.length} events one after another, the request on the same stream`,
          floor.workFenced,
        ),
        row(
          'fenced floor, the request sent twice as pge sends it (an event, then a work item)',
          floor.workFencedTwice,
        ),
        row(`core request/reply, ${floor.payloadBytes.core} B`, floor.coreRequestReply),
      ],
    ),
  );
  out.push(
    `pge / floor: ${fixed(nats.perCallOverFloor, 2)}× (core delivery), ${fixed(nats.perCallOverOrderedFloor, 2)}× (ordered consumer); scaling 8 / 1 workers per role: ${nats.scaling8 === null ? '-' : `${fixed(nats.scaling8, 2)}×`}`,
  );
  out.push(
    `fenced floor / floor: ${fixed(nats.fencedFloorOverFloor, 2)}× (the least pge / floor can be in pge's design); pge / fenced floor: ${fixed(nats.perCallOverFencedFloor, 2)}×; the request sent twice / once: ${fixed(nats.requestTwiceOverOnce, 2)}×`,
  );
  const T = NATS_PATH_TARGETS;
  const v = pathVerdicts(nats);
  const scaling = v.natsScaling8 ? `; scaling 8 / 1 ≥ ${T.scaling8}×: ${verdict(v.natsScaling8.pass)}` : '';
  out.push(
    `targets (issue #14): per call ≤ ${T.perCallOverFloor}× the floor: ${verdict(v.natsPerCallOverFloor.pass)}; messages into the server per call ≤ ${T.serverMessagesPerCall}: ${verdict(v.natsServerMessagesPerCall.pass)}${scaling}`,
  );
  const byConnection = nats.busOverhead.servicesNats.traffic?.byConnection ?? {};
  const names = Object.keys(byConnection).sort();
  if (names.length > 0) {
    out.push('messages per model call by connection (into / out of the server, section 6):');
    out.push(
      table(
        ['connection', 'msgs in', 'msgs out', 'bytes in', 'bytes out'],
        names.map((name) => {
          const c = byConnection[name]!;
          return [name, fixed(c.inMsgs, 2), fixed(c.outMsgs, 2), int(c.inBytes), int(c.outBytes)];
        }),
      ),
    );
  }
  out.push('');
  return out;
}
