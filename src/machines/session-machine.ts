import { and, assign, sendTo, setup } from 'xstate';
import type { ApprovalDecision } from '../schemas/index.js';
import { runMachine } from './run-machine.js';
import {
  approvalDelay,
  dueGate,
  fittingGate,
  noDecisionWithin,
  publishFailedInterrupt,
  type SessionContext,
  type SessionEvent,
  type SessionInput,
  type SessionOutput,
  withoutGate,
} from './session-context.js';

export type { OpenGate, SessionEvent, SessionInput, SessionOutput } from './session-context.js';

/**
 * The run session: the life of one run on the coordinator that owns it. It invokes the run chart
 * (which invokes the step chart) and keeps what lies around it: a resumed run replays its
 * recorded events before it goes live; a gate waits for a person until its deadline (an `after`
 * transition; each call's deadline is the `after` of the chart state that makes it); a person's
 * decision, a lost lease, a failed publish and an interrupt arrive as events. It ends with the run's
 * outcome (`closed`) or with the error that ended it (`takenOver`, `diverged`, `failed`), as its
 * final states' output. Free of I/O like the charts it owns: the coordinator provides the actions
 * that settle a gate and let the run go (`src/actors/run-charts.ts`).
 */

const AWAITING = '#session.open.live.awaitingDecision';
const WORKING = '#session.open.live.working';
type DecideEvent = Extract<SessionEvent, { type: 'decide' }>;

/**
 * A person's decision at a gate (`decisionFits`): it settles the gate, which closes; the session
 * works on once no gate is open (`lastGate`), else waits on at the others, their deadline counted
 * from the decision.
 */
const decidedGate = {
  type: 'settleDecision',
  params: ({ context, event }: { context: SessionContext; event: SessionEvent }) => ({
    requestId: fittingGate(context, event as DecideEvent)!.requestId,
    decision: (event as DecideEvent).decision,
  }),
} as const;
/** At the deadline of the oldest gate, its decision by the policy (`approve` or `reject`). */
const settleAtDeadline = {
  type: 'settleDecision',
  params: ({ context }: { context: SessionContext }) => ({
    requestId: dueGate(context).requestId,
    decision: {
      decision: context.run.approvalDeadline!.policy as 'approve' | 'reject',
      reason: noDecisionWithin(context),
      by: 'deadline',
    },
  }),
} as const;

const decide = [
  { guard: and(['decisionFits', 'lastGate']), target: WORKING, actions: [decidedGate, 'closeDecided'] },
  { guard: 'decisionFits', target: AWAITING, reenter: true, actions: [decidedGate, 'closeDecided'] },
] as const;

/** The session statechart. Provide `settleDecision`, `letGo` and `run` (the run chart with its calls). */
export const sessionMachine = setup({
  types: {
    context: {} as SessionContext,
    input: {} as SessionInput,
    output: {} as SessionOutput,
    events: {} as SessionEvent,
    children: {} as { run: 'run' },
  },
  actors: { run: runMachine },
  guards: {
    /** The replay parted from its log: the run chart's end is the divergence's. */
    diverging: ({ context }) => context.error !== null,
    /** A resumed run: its recorded events are replayed first. */
    resumed: ({ context }) => context.replaying,
    /** The decision is for a gate the session waits at (and its request, when it names one). */
    decisionFits: ({ context, event }) =>
      event.type === 'decide' && fittingGate(context, event) !== undefined,
    /** Only one gate is open: once it closes, the session works on. */
    lastGate: ({ context }) => context.gates.length === 1,
    /** The gate that left (`approval.left`) was the only one open. */
    lastGateLeft: ({ context, event }) =>
      event.type === 'approval.left' && withoutGate(context, event.requestId).length === 0,
    /** The run has an approval deadline (`approvalTimeoutMs`). */
    hasApprovalDeadline: ({ context }) => context.run.approvalDeadline !== undefined,
    /** The deadline's policy is `stop`: the run is interrupted rather than decided for. */
    deadlineStopsRun: ({ context }) => context.run.approvalDeadline?.policy === 'stop',
  },
  actions: {
    /** Settles a gate with a decision (the coordinator records `approval.decided`). */
    settleDecision: (_, _params: { requestId: string; decision: ApprovalDecision }) => {},
    /** Lets the run go to `owner`: nothing more is recorded or sent. */
    letGo: (_, _params: { owner: string; error: Error }) => {},
    /** A gate's `approval.requested`: it is open, and the deadline counts from now. */
    openGate: assign(({ context, event }) => {
      const { gate, requestId, requestedAt, now } = event as Extract<
        SessionEvent,
        { type: 'approval.requested' }
      >;
      return { gates: [...context.gates, { gate, requestId, requestedAt }], since: now };
    }),
    /** The gate a person decided closes; the deadline of the others counts from the decision. */
    closeDecided: assign(({ context, event }) => {
      const decided = event as DecideEvent;
      return { gates: withoutGate(context, fittingGate(context, decided)!.requestId), since: decided.now };
    }),
    /** A gate whose actor was stopped is no longer waited at. */
    closeLeftGate: assign(({ context, event }) => {
      const { requestId, now } = event as Extract<SessionEvent, { type: 'approval.left' }>;
      return { gates: withoutGate(context, requestId), since: now };
    }),
    /** The oldest gate, decided by its deadline (`approve` or `reject`), closes; the next deadline counts from its. */
    closeDueGate: assign(({ context }) => ({
      gates: withoutGate(context, dueGate(context).requestId),
      since: context.since + approvalDelay(context),
    })),
  },
  delays: {
    approvalDeadline: ({ context }) => approvalDelay(context),
  },
}).createMachine({
  id: 'session',
  description: 'The life of one run on the coordinator that owns it, around the run chart it invokes.',
  context: ({ input }) => ({ ...input, gates: [], since: 0, error: null, outcome: null }),
  initial: 'open',
  output: ({ event }) => event.output as SessionOutput,
  states: {
    open: {
      description:
        'The run chart (`invoke: run`) runs, and the step chart under it. `interrupt` and `cancel` are passed to the run chart, which records its closing event; a failed publish interrupts it the same way, the failure named in the reason. A lost lease (`abandon`) goes to `takenOver`.',
      invoke: {
        id: 'run',
        systemId: 'run',
        src: 'run',
        input: ({ context }) => context.run,
        onDone: [
          { guard: 'diverging', target: 'diverged' },
          { target: 'closed', actions: assign({ outcome: ({ event }) => event.output }) },
        ],
        onError: [
          { guard: 'diverging', target: 'diverged' },
          { target: 'failed', actions: assign({ error: ({ event }) => event.error }) },
        ],
      },
      on: {
        interrupt: { actions: sendTo('run', ({ event }) => event) },
        cancel: { actions: sendTo('run', ({ event }) => event) },
        'publish.failed': { actions: sendTo('run', ({ event }) => publishFailedInterrupt(event.error)) },
        abandon: {
          target: 'takenOver',
          actions: [
            assign({ error: ({ event }) => event.error }),
            { type: 'letGo', params: ({ event }) => ({ owner: event.owner, error: event.error }) },
          ],
        },
        diverged: { target: '.diverging', actions: assign({ error: ({ event }) => event.error }) },
      },
      initial: 'opening',
      states: {
        opening: {
          description:
            'Chooses where the session starts: a resumed run replays (`resumed`), a new one is live.',
          always: [{ guard: 'resumed', target: 'replaying' }, { target: 'live' }],
        },
        replaying: {
          description:
            'A resumed run: every call is answered and every decision taken from the recorded events, and each event the charts produce again must equal the recorded one (else `diverged`); nothing is published. When the recorded events run out (`replay.ended`: a call or gate the log does not answer, or an event past its end) `run.resumed` is recorded and the run is live. A replay-only run (`pge replay`) never goes live: where the log ends it is `diverged`, unless the log says the run was interrupted there.',
          on: { 'replay.ended': 'live' },
        },
        diverging: {
          description:
            'The replay and its log disagree (`diverged`): nothing more is recorded, so the run chart fails at its next event; its end, whatever it is, goes to `diverged`.',
        },
        live: {
          description:
            'Every event is stamped with the next seq and published; calls go to the role workers, each waited for by the chart state that makes it (`after callDeadline`).',
          initial: 'working',
          states: {
            working: {
              description: 'The charts decide, record and call the roles; no gate is open.',
              on: { 'approval.requested': { target: 'awaitingDecision', actions: 'openGate' } },
            },
            awaitingDecision: {
              description:
                "A gate's `approval.requested` is recorded and a person is waited for (`waitingAt`); steps side by side may each wait at a gate, and each holds only itself and its dependents. A decision for an open gate (`decide`, `decisionFits`: the oldest of its kind, or the one it names) is recorded as `approval.decided` and that step goes on; once no gate is open (`lastGate`), back to working. The last gate left (`approval.left`, the run interrupted): back to working.",
              on: {
                'approval.requested': { target: AWAITING, reenter: true, actions: 'openGate' },
                'approval.left': [
                  { guard: 'lastGateLeft', target: 'working', actions: 'closeLeftGate' },
                  { target: AWAITING, reenter: true, actions: 'closeLeftGate' },
                ],
              },
              initial: 'deadline',
              states: {
                deadline: {
                  description:
                    'With `approvalTimeoutMs` (`hasApprovalDeadline`) the wait is timed; otherwise it is not.',
                  always: [{ guard: 'hasApprovalDeadline', target: 'timed' }, { target: 'untimed' }],
                },
                untimed: {
                  description: 'No deadline: the gate waits as long as it takes, across restarts.',
                  tags: ['waiting'],
                  on: { decide },
                },
                timed: {
                  description:
                    "Waits until the oldest open gate's deadline, counted from its request's recorded time so that a restart does not reset it (`after approvalDeadline`). At the deadline, `onApprovalTimeout`: `stop` (`deadlineStopsRun`) interrupts the run, the gate named in the reason; `approve` or `reject` settles the gate with that decision, `by: deadline`, and the session waits on at the other gates, if any.",
                  tags: ['waiting'],
                  on: { decide },
                  after: {
                    approvalDeadline: [
                      {
                        guard: 'deadlineStopsRun',
                        target: 'expired',
                        actions: sendTo('run', ({ context }) => ({
                          type: 'interrupt' as const,
                          reason: `the ${dueGate(context).gate} gate had ${noDecisionWithin(context)}`,
                        })),
                      },
                      { guard: 'lastGate', target: WORKING, actions: [settleAtDeadline, 'closeDueGate'] },
                      { target: AWAITING, reenter: true, actions: [settleAtDeadline, 'closeDueGate'] },
                    ],
                  },
                },
                expired: {
                  description:
                    'The deadline stopped the run: no decision is taken any more; the run is being interrupted.',
                },
              },
            },
          },
        },
      },
    },
    closed: {
      type: 'final',
      description:
        "The run chart reached a final state and recorded its closing event: the output is the run's outcome.",
      output: ({ context }) => ({ outcome: context.outcome! }),
    },
    takenOver: {
      type: 'final',
      description:
        'The run was let go: its lease went to another coordinator (`abandon`), or another coordinator recorded an event of a seq this one recorded. Nothing more is recorded or published, and a call in flight is not cancelled (its new owner waits for the result). The output is a `RunTakenOverError`.',
      output: ({ context }) => ({ error: context.error }),
    },
    diverged: {
      type: 'final',
      description:
        'The replay and the log disagree, or a replay-only run went past its log: nothing more is recorded. The output is the `ReplayDivergence`.',
      output: ({ context }) => ({ error: context.error }),
    },
    failed: {
      type: 'final',
      description:
        'The run chart failed (an action threw, the log could not be written): the output is its error.',
      output: ({ context }) => ({ error: context.error }),
    },
  },
});
