import type { PgeOptions } from '../api/options.js';
import { NatsBus } from '../bus/nats-bus.js';
import { natsOptionsFromEnv } from '../bus/nats-connection.js';
import { submitAndFollow } from '../runtime/services.js';
import { checkTask } from '../runtime/task.js';
import { OPTION_DEFAULTS } from '../schemas/setting-values.js';
import { RunSubmissionOptions } from '../schemas/submission.js';
import { ExitCode } from './exit-codes.js';
import type { CliIo } from './io.js';
import { Progress } from './progress.js';

/**
 * `pge run --nats <url> "<task>"`: the task goes to a distributed deployment (`pge worker`
 * processes, or docker compose) by `pge.runs.submit`; this process only follows the run's events,
 * showing the same progress as a local run, and exits with the same codes. The workers own the
 * models and the logs, so only run settings travel; the log is written where the persistence
 * worker keeps its logs.
 */

// Every run setting a submission may carry: the schema is the list.
const SUBMITTED = RunSubmissionOptions.keyof().options;

/** Runs `task` on the deployment at `servers`; returns the exit code. */
export async function remoteRun(
  task: string,
  servers: string,
  options: PgeOptions,
  json: boolean,
  io: CliIo,
): Promise<number> {
  // The coordinator holds the task to its own limit too; this one answers before connecting.
  checkTask(task, options.maxTaskBytes ?? OPTION_DEFAULTS.maxTaskBytes);
  const submitted = Object.fromEntries(
    SUBMITTED.filter((k) => options[k] !== undefined).map((k) => [k, options[k]]),
  ) as RunSubmissionOptions;
  const progress = new Progress({
    stream: io.stderr,
    live: io.stderr.isTTY === true,
    verbose: options.verbose === true,
  });
  const bus = await NatsBus.connect({ ...natsOptionsFromEnv(io.env), servers, name: 'pge-run' });
  let interrupted = false;
  const onSignal = () => {
    interrupted = true;
    progress.note('interrupted: no longer following the run (it goes on in the deployment)');
  };
  process.once('SIGINT', onSignal);
  process.once('SIGTERM', onSignal);
  try {
    const { closing } = await submitAndFollow(bus, { task, options: submitted }, progress.onEvent);
    const last = await Promise.race([
      closing,
      new Promise<null>((resolve) => {
        const timer = setInterval(() => {
          if (interrupted) {
            clearInterval(timer);
            resolve(null);
          }
        }, 100);
        void closing.finally(() => clearInterval(timer));
      }),
    ]);
    progress.stop();
    if (last === null) return ExitCode.interrupted;
    io.stdout.write(json ? `${JSON.stringify(last, null, 2)}\n` : `${last.payload.summary}\n`);
    if (last.type === 'run.completed') return last.payload.passed ? ExitCode.passed : ExitCode.failed;
    const reason = last.payload.reason;
    return reason === 'interrupted'
      ? ExitCode.interrupted
      : reason === 'error'
        ? ExitCode.model
        : ExitCode.failed;
  } finally {
    progress.stop();
    process.off('SIGINT', onSignal);
    process.off('SIGTERM', onSignal);
    await bus.close();
  }
}
