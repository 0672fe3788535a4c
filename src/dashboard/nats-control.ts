import { NatsBus, type NatsBusOptions } from '../bus/nats-bus.js';
import { ConfigurationError } from '../errors.js';
import { decide } from '../runtime/approvals.js';
import { cancelRun, endedAs } from '../runtime/run-cancel.js';
import { submitAndFollow } from '../runtime/services.js';
import { decidedMessage, forkedMessage, type RunControl, startSettingsOf } from './run-control.js';

/**
 * Acting on a deployment's runs (`pge dashboard --control --nats <url>`) as `pge approve`,
 * `pge cancel` and `pge run --nats` do, on one connection with the dashboard's credential, which
 * must be a client's: the client role may submit runs, decide gates and cancel runs, and read
 * every run's events (docs/security.md). A decision, a cancel, a submission is done once the
 * deployment has answered it; the run's events then reach the page through the dashboard's NATS
 * source. A fork of an ended run is a submission too (`RunSubmission.fork`, as `pge fork --nats`
 * sends it): the coordinator that takes it reads the parent's events from the stream.
 */

/** Connects (rejecting with `ConfigurationError` when the server cannot be reached). */
export async function natsControl(options: NatsBusOptions): Promise<RunControl> {
  const bus = await NatsBus.connect({ ...options, name: 'pge-dashboard-control' });
  return {
    abilities: { fork: true, model: null, where: 'nats' },
    abilitiesFor(view) {
      // The parent's events are read from the stream by the coordinator that takes the fork.
      const running = view.status === 'running';
      return { act: running, fork: !running };
    },
    async decide(action, by: string) {
      const { runId, gate, decision, reason, requestId } = action;
      // The very request the page showed: another of the same gate (a step beside it) is not settled.
      await decide(bus, runId, gate, { decision, reason, by }, { requestId });
      return { runId, message: decidedMessage(action, by) };
    },
    async cancel(action, by: string) {
      const { runId, reason } = action;
      const { owner, closing } = await cancelRun(bus, runId, by, reason);
      const cancelled = closing.type === 'run.failed' && closing.payload.reason === 'cancelled';
      return {
        runId,
        message: cancelled
          ? `run ${runId}: cancelled by ${by} (coordinator ${owner})`
          : `run ${runId}: it ended (${endedAs(closing)}) before the cancel reached it`,
      };
    },
    async start(action, by: string) {
      if (action.model !== undefined)
        throw new ConfigurationError(
          'a run on NATS cannot name a model: the role workers of the deployment hold the models',
        );
      const { runId, stop } = await submitAndFollow(bus, {
        task: action.task,
        options: startSettingsOf(action),
        by,
      });
      // The dashboard's NATS source shows the run: this follower was only for the submission.
      stop();
      return { runId, message: `run ${runId} submitted by ${by}` };
    },
    async fork(action, by: string) {
      const { runId: parent, fromStep, settings } = action;
      const { runId, stop } = await submitAndFollow(bus, {
        fork: { runId: parent, fromStep, ...(settings === undefined ? {} : { settings }) },
        by,
      });
      // As for a start: the dashboard's NATS source shows the fork.
      stop();
      return { runId, message: forkedMessage(action, runId, by) };
    },
    close: () => bus.close(),
  };
}
