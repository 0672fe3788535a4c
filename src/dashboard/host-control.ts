import type { PgeOptions } from '../api/options.js';
import { subscribeEvents } from '../bus/channels.js';
import { subjects } from '../bus/subjects.js';
import { ConfigurationError } from '../errors.js';
import { endedAs } from '../runtime/run-cancel.js';
import { type RunClient, runClient } from '../runtime/run-client.js';
import type { RunEvent } from '../schemas/index.js';
import type { ControlAbilities } from './control-types.js';
import { decidedMessage, forkedMessage, type RunControl, startSettingsOf } from './run-control.js';
import type { RunStore } from './run-store.js';

/**
 * Acting on a host's runs (`pge dashboard --control`) as `pge approve`, `pge cancel` and `pge run`
 * do: through the coordinator service's subjects, whichever bus carries them. On NATS, one
 * connection with the dashboard's credential, which must be a client's: the client role may submit
 * runs, decide gates and cancel runs, and read every run's events (docs/security.md). Embedded, the
 * in-process bus of the dashboard's own host, whose store is the runs' logs. A decision, a cancel,
 * a submission is done once the host has answered it; the run's events then reach the page through
 * the dashboard's source. A fork of an ended run is a submission too (`RunSubmission.fork`): the
 * coordinator that takes it reads the parent's events from its store.
 */

/**
 * A `RunControl` through `client`; `where` says which host the page acts on. Closing it closes the
 * client (a NATS connection, or the embedded host). The role workers hold the models, so a run
 * started from the page cannot name one.
 */
export function hostControl(client: RunClient, where: ControlAbilities['where']): RunControl {
  return {
    abilities: { fork: true, model: null, where },
    abilitiesFor(view) {
      // The parent's events are read from its store by the coordinator that takes the fork.
      const running = view.status === 'running';
      return { act: running, fork: !running };
    },
    async decide(action, by: string) {
      const { runId, gate, decision, reason, requestId } = action;
      // The very request the page showed: another of the same gate (a step beside it) is not settled.
      await client.approve(runId, gate, { decision, reason, by }, { requestId });
      return { runId, message: decidedMessage(action, by) };
    },
    async cancel(action, by: string) {
      const { runId, reason } = action;
      const { owner, closing } = await client.cancel(runId, by, reason);
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
          'a run started here cannot name a model: the role workers hold the models (pge dashboard --model sets them)',
        );
      const { runId, stop } = await client.submit({
        task: action.task,
        options: startSettingsOf(action),
        by,
      });
      // The dashboard's source shows the run: this follower was only for the submission.
      stop();
      return { runId, message: `run ${runId} submitted by ${by}` };
    },
    async fork(action, by: string) {
      const { runId: parent, fromStep, settings } = action;
      const { runId, stop } = await client.submit({
        fork: { runId: parent, fromStep, ...(settings === undefined ? {} : { settings }) },
        by,
      });
      // As for a start: the dashboard's source shows the fork.
      stop();
      return { runId, message: forkedMessage(action, runId, by) };
    },
    close: () => client.close(),
  };
}

/**
 * The control of a dashboard that hosts its own runs (`pge dashboard --control` without NATS): an
 * embedded host with `options` (models, working directory, run settings), whose every event goes
 * to `store`, after the runs its working directory's logs held already (so the page lists every
 * run there, those that ended before it opened too). Throws `ConfigurationError` for a bad option.
 */
export async function embeddedHostControl(store: RunStore, options: PgeOptions): Promise<RunControl> {
  const [{ startHost }, { readLoggedRuns }] = await Promise.all([
    import('../api/host.js'),
    import('../runtime/logged-runs.js'),
  ]);
  const host = startHost(options, (problem) => store.problem(problem));
  subscribeEvents(host.bus, '*', (event) => store.add(event));
  try {
    // After the subscription: a run that starts meanwhile is added twice at most, and the store drops repeats.
    const { records, problems } = await readLoggedRuns(host.settings.workingDirectory);
    for (const event of (await records.stored(subjects.events('*'))) as RunEvent[]) store.add(event);
    for (const problem of problems) store.problem(problem);
  } catch (error) {
    await host.close();
    throw error;
  }
  return hostControl(
    runClient(host.bus, () => host.close()),
    'embedded',
  );
}
