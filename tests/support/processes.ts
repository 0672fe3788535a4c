import { type ChildProcess, spawn } from 'node:child_process';
import { join } from 'node:path';
import type { NatsRole } from '../../src/bus/permissions.js';
import { watchOutput } from './diagnostics.js';

/** Child processes of the `pge` CLI for multi-process tests: started, awaited, stopped. */

export const ROOT = join(import.meta.dirname, '..', '..');
const BIN = join(ROOT, 'bin', 'pge.js');

/** A running `pge` process with its output so far. */
export interface PgeProcess {
  readonly child: ChildProcess;
  stdout(): string;
  stderr(): string;
  /** Resolves when stderr has a line matching `pattern`; rejects after `timeoutMs` with the output. */
  waitFor(pattern: RegExp, timeoutMs?: number): Promise<void>;
  /** Resolves with the exit code. */
  exited(): Promise<number | null>;
  /** Sends `signal` and resolves with the exit code (SIGKILL after `graceMs`). */
  stop(signal?: NodeJS.Signals, graceMs?: number): Promise<number | null>;
}

/** Starts `node bin/pge.js …args` with exactly `env` (plus PATH). */
export function startPge(args: readonly string[], env: Record<string, string>, cwd = ROOT): PgeProcess {
  const child = spawn(process.execPath, [BIN, ...args], {
    cwd,
    env: { PATH: process.env.PATH ?? '/usr/bin:/bin', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let out = '';
  let err = '';
  const watch = watchOutput(`pge ${args.join(' ')} (pid ${child.pid})`);
  child.stdout?.on('data', (d: Buffer) => {
    out += d.toString();
  });
  child.stderr?.on('data', (d: Buffer) => {
    err += d.toString();
    watch(d.toString());
  });
  child.on('exit', (code, signal) => watch(`(exited: ${signal ?? code})\n`));
  const exit = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
  return {
    child,
    stdout: () => out,
    stderr: () => err,
    exited: () => exit,
    waitFor(pattern, timeoutMs = 15_000) {
      return new Promise((resolve, reject) => {
        const started = Date.now();
        const check = () => {
          if (pattern.test(err)) return resolve();
          if (child.exitCode !== null)
            return reject(new Error(`pge ${args.join(' ')} exited ${child.exitCode}: ${err}`));
          if (Date.now() - started > timeoutMs)
            return reject(new Error(`no ${pattern} from pge ${args.join(' ')}: ${err}`));
          setTimeout(check, 25);
        };
        check();
      });
    },
    async stop(signal = 'SIGTERM', graceMs = 10_000) {
      if (child.exitCode !== null) return child.exitCode;
      child.kill(signal);
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs);
      const code = await exit;
      clearTimeout(timer);
      return code;
    },
  };
}

/**
 * Starts `pge worker --role <role> …flags` for each of `roles` with `env(role)`, all at the same
 * moment, as a compose file or an orchestrator starts them. Each process goes into `started` as it
 * starts, so that a caller stops them all even when one never gets ready; resolves with them once
 * every one is ready.
 */
export async function startWorkersAtOnce(
  roles: readonly (readonly [NatsRole, readonly string[]])[],
  env: (role: NatsRole) => Record<string, string>,
  started: PgeProcess[] = [],
  readyMs = 30_000,
): Promise<PgeProcess[]> {
  const processes = roles.map(([role, flags]) => {
    const process = startPge(['worker', '--role', role, ...flags], env(role));
    started.push(process);
    return process;
  });
  await Promise.all(processes.map((p) => p.waitFor(/ready/, readyMs)));
  return processes;
}
