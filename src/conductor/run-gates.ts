import type { SessionEvent } from '../machines/session-machine.js';
import type { ApprovalInput, ApprovalOutput } from '../machines/types.js';
import type { ApprovalDecision } from '../schemas/index.js';
import { untilStopped } from './run-calls.js';
import { GATE, type RunRecorder } from './run-recorder.js';

/**
 * One run's gates, as its session waits at them: a gate is an `approval.requested` recorded and
 * told to the session, settled by a person's decision or its deadline (the session's
 * `settleDecision`). A resumed run's gates take their recorded decisions while it replays.
 */
export class RunGates {
  readonly #gates = new Map<string, (decision: ApprovalDecision) => void>();

  constructor(
    private readonly clock: () => number,
    private readonly recorder: RunRecorder,
    private readonly session: { send(event: SessionEvent): void },
  ) {}

  /**
   * Records `approval.requested` and waits for a person's decision (the session's
   * `settleDecision`), recorded as `approval.decided`. A replay takes the recorded decision; one
   * the log does not hold (the run was waiting when its process died) is waited for again.
   */
  async awaitDecision(input: ApprovalInput, signal: AbortSignal): Promise<ApprovalOutput> {
    signal.throwIfAborted();
    const request = this.recorder.record({ type: 'approval.requested', payload: input });
    const decided = (decision: ApprovalDecision): ApprovalDecision => {
      const payload = { requestId: request.id, gate: input.gate, ...decision };
      this.recorder.record({ type: 'approval.decided', payload });
      return decision;
    };
    const { replay, resume } = this.recorder;
    if (replay !== null && resume !== null) {
      const recorded = resume.recorded.decisions.get(request.id);
      if (recorded !== undefined) {
        await this.recorder.inTurn(recorded.seq);
        return decided(recorded.decision);
      }
      const missing = `approval ${request.id} has no recorded decision`;
      if (await this.recorder.atLogEnd(`${GATE}${request.id}`, missing, signal)) return untilStopped(signal);
    }
    const promise = new Promise<ApprovalOutput>((resolve, reject) => {
      const onAbort = () => {
        this.#gates.delete(request.id);
        this.session.send({ type: 'approval.left', requestId: request.id, now: this.clock() });
        reject(signal.reason);
      };
      signal.addEventListener('abort', onAbort, { once: true });
      this.#gates.set(request.id, (decision) => {
        signal.removeEventListener('abort', onAbort);
        this.#gates.delete(request.id);
        resolve(decided(decision));
      });
    });
    // A wall-clock deadline from the request: a restart of the process that waited does not reset it.
    const [requestedAt, now] = [Date.parse(request.ts), this.clock()];
    this.session.send({
      type: 'approval.requested',
      gate: input.gate,
      requestId: request.id,
      requestedAt,
      now,
    });
    return promise;
  }

  /** The session's `settleDecision`: the gate of `requestId` takes the decision. */
  settleDecision(requestId: string, decision: ApprovalDecision): void {
    this.#gates.get(requestId)?.(decision);
  }
}
