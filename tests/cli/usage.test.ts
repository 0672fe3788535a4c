import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { COMMAND_HELP } from '../../src/cli/help.js';
import { parseWorkerCommand } from '../../src/cli/worker-process.js';
import { MACHINE_NAMES } from '../../src/graph/graph-choices.js';
import { DEFAULT_WORKER_CONCURRENCY } from '../../src/schemas/index.js';
import { runCli } from './run-cli.js';

/**
 * Mistakes a new user makes on the command line, run through the real CLI: each gets exit code 2
 * and a message that says what to write instead, never the parser's or the schema library's text.
 */

let tmp: string;
beforeEach(() => {
  tmp = mkdtempSync(join(tmpdir(), 'pge-usage-'));
});
afterEach(() => {
  rmSync(tmp, { recursive: true, force: true });
});

const pge = (args: string[]) => runCli(args, { cwd: tmp });

async function usageError(args: string[]): Promise<string> {
  const r = await pge(args);
  expect(r.code).toBe(2);
  expect(r.stdout).toBe('');
  return r.stderr;
}

describe('flag mistakes', () => {
  it('suggests the flag a typo meant, in a sentence with no stray quote', async () => {
    const stderr = await usageError(['run', 'Write a haiku', '--max-retires', '2']);
    expect(stderr).toBe(
      "pge: unknown flag --max-retires; did you mean --max-retries?\nRun 'pge run --help' for usage.\n",
    );
  });

  it('says a count must be an integer >= 0 when it is negative', async () => {
    const stderr = await usageError(['run', 'Write a haiku', '--max-retries', '-1']);
    expect(stderr).toContain('--max-retries expects an integer >= 0, got "-1"');
    expect(stderr).not.toMatch(/ambiguous/);
  });

  it("refuses a --call-timeout or --approval-timeout past Node's longest timer (24.8 days)", async () => {
    expect(await usageError(['run', 'Write a haiku', '--call-timeout', '30d'])).toContain(
      '--call-timeout: callTimeoutMs must be at most 2147483647 (24.8 days)',
    );
    expect(await usageError(['run', 'Write a haiku', '--approval-timeout', '25d'])).toContain(
      '--approval-timeout: approvalTimeoutMs must be at most 2147483647 (24.8 days)',
    );
  });

  it('says a flag needs its value rather than reading the next flag as one', async () => {
    const stderr = await usageError(['run', 'Write a haiku', '--model', '--json']);
    expect(stderr).toContain('--model needs a value: --model <name>');
    // A command declared whole in its own file is checked the same, before commander reads the line.
    expect(await usageError(['config', '--model', '--json'])).toContain(
      '--model needs a value: --model <name>',
    );
    expect(await usageError(['approve', 'run-1', '--reject', '--by', 'ana'])).toContain(
      '--reject needs a value: --reject <reason>',
    );
  });

  it('prints the help when --help is anywhere on the line, before any value is checked', async () => {
    for (const args of [
      ['run', '--max-steps', 'many', '--help'],
      ['config', '--max-steps', 'many', '--help'],
      ['follow', 'run-1', '--from-seq', 'x', '-h'],
    ]) {
      const r = await pge(args);
      expect(r.code, args.join(' ')).toBe(0);
      expect(r.stdout, args.join(' ')).toMatch(new RegExp(`^Usage: pge ${args[0]} `));
    }
  });

  it('asks for a base URL with a scheme and shows the one meant', async () => {
    const stderr = await usageError(['run', 'Write a haiku', '--base-url', '127.0.0.1:9999']);
    expect(stderr).toContain(
      '--base-url: baseURL must be an http:// or https:// URL, such as http://127.0.0.1:9999;',
    );
    expect(stderr).not.toMatch(/OpenAIModel|Invalid URL/);
    const env = await runCli(['run', 'Write a haiku'], {
      cwd: tmp,
      env: { OPENAI_BASE_URL: 'localhost:8000/v1' },
    });
    expect(env.code).toBe(2);
    expect(env.stderr).toContain(
      'OPENAI_BASE_URL: baseURL must be an http:// or https:// URL, such as http://localhost:8000/v1',
    );
  });

  it('suggests the command a typo meant', async () => {
    const typo = await usageError(['rnu', 'Write a haiku']);
    expect(typo).toContain("unknown command 'rnu'\n(Did you mean run?)");
    // Every command is listed, from the same table that runs them.
    expect(typo).toContain(
      'the commands are run, demo, plan, resume, batch, config, graph, replay, fork, continue, runs, approvals, approve, cancel, worker, dashboard, follow, nats-config, help',
    );
  });

  it.each(['config', 'graph', 'runs', 'approvals', 'worker', 'nats-config'])(
    'says pge %s takes no arguments, before it reads anything else',
    async (command) => {
      expect(await usageError([command, 'extra', 'words'])).toBe(
        `pge: too many arguments for '${command}'. Expected 0 arguments but got 2.\nRun 'pge ${command} --help' for usage.\n`,
      );
    },
  );

  it('refuses a pge runs filter it cannot read, before it connects', async () => {
    // NATS on a port nothing listens on: a usage error must come first.
    const at = ['--nats', 'nats://127.0.0.1:9'];
    expect(await usageError(['runs', '--status', 'running,done', ...at])).toContain(
      '--status takes some of running, waiting, passed, completed, aborted, stopped, failed, interrupted',
    );
    expect(await usageError(['runs', '--status', 'running,done', ...at])).toContain(', not "done"');
    expect(await usageError(['runs', '--since', '90', ...at])).toContain(
      '--since takes a duration with its unit (30m, 1h, 7d) or an ISO time (2026-11-28T09:00:00Z), not "90"',
    );
    expect(await usageError(['runs', '--since', '2026-13-45', ...at])).toContain('not "2026-13-45"');
    expect(await usageError(['runs', '--job', 'pge.run.>', ...at])).toContain(
      `--job takes a job's id, its first run's id (letters, digits, "-" and "_"), not "pge.run.>"`,
    );
  });

  it('fails fast on a working directory that cannot be created (procfs)', async () => {
    // A recursive mkdir under /proc never returns: the file system answers ENOENT for ever.
    const dir = `/proc/pge-${process.pid}/logs`;
    const r = await runCli(['run', 'Write a haiku', '--working-dir', dir], { cwd: tmp, killAfterMs: 10_000 });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(
      `workingDirectory ${dir} is not a writable directory: it cannot be created (ENOENT`,
    );
  });

  it('says why a log cannot be resumed or forked, before it looks for an API key', async () => {
    writeFileSync(join(tmp, 'notes.md'), '# My notes\n');
    const noKey = { cwd: tmp, env: { OPENAI_API_KEY: '' } };
    const cases: [string[], string][] = [
      [['resume', 'missing.md'], `cannot resume ${join(tmp, 'missing.md')}: ENOENT`],
      [['resume', 'notes.md'], `cannot resume ${join(tmp, 'notes.md')}: it is not a pge log`],
      [['resume', '.'], `cannot resume ${tmp}: EISDIR`],
      [['fork', 'missing.md', '--from-step', '1'], `cannot fork ${join(tmp, 'missing.md')}: ENOENT`],
    ];
    for (const [args, message] of cases) {
      const r = await runCli(args, noKey);
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr, args.join(' ')).toContain(message);
      expect(r.stderr, args.join(' ')).not.toContain('OPENAI_API_KEY');
    }
  });

  it('fails fast on a working directory that exists but takes no new entry, even for root (procfs)', async () => {
    // `access(W_OK)` says yes to root on /proc, where the runs' workspaces could then never be made.
    const r = await runCli(['demo', '--working-dir', '/proc'], { cwd: tmp, killAfterMs: 10_000 });
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(
      'workingDirectory /proc is not a writable directory: nothing can be created in it (',
    );
    expect(r.stdout).toBe('');
  });
});

describe('pge worker', () => {
  it('parses its flags with the same table and messages as every command', async () => {
    const typo = await usageError(['worker', '--role', 'generator', '--concurency', '2']);
    expect(typo).toContain("unknown option '--concurency'\n(Did you mean --concurrency?)");
    expect(await usageError(['worker', '--role', 'judge'])).toContain(
      "option '--role <role>' argument 'judge' is invalid. Allowed choices are planner, generator, evaluator, persistence, coordinator.",
    );
    expect(await usageError(['worker', '--demo'])).toContain('pge worker needs --role');
    expect(await usageError(['worker', '--role', 'planner', 'extra'])).toContain(
      "too many arguments for 'worker'",
    );
  });

  it("gives a coordinator the generators' workspaces directory, and no other role --workspaces", () => {
    const workspaces = (args: string[]) =>
      parseWorkerCommand(['--role', 'coordinator', ...args], { env: {}, cwd: tmp }).workspaces;
    expect(workspaces(['--working-dir', 'shared'])).toBe(join(tmp, 'shared', 'workspaces'));
    expect(workspaces(['--workspaces', '/mnt/pge/workspaces'])).toBe('/mnt/pge/workspaces');
    expect(workspaces(['--workspaces', 'ws'])).toBe(join(tmp, 'ws'));
    expect(parseWorkerCommand(['--role', 'generator'], { env: {}, cwd: tmp }).workspaces).toBeNull();
    expect(() =>
      parseWorkerCommand(['--role', 'generator', '--workspaces', 'ws'], { env: {}, cwd: tmp }),
    ).toThrow(
      /^--workspaces is the coordinator's .*: a generator worker keeps runs' workspaces under --working-dir$/,
    );
  });

  it("takes createRoleWorker's default concurrency, and its help says which", async () => {
    const plan = parseWorkerCommand(['--role', 'generator', '--demo'], { env: {}, cwd: tmp });
    expect(plan.concurrency).toBe(DEFAULT_WORKER_CONCURRENCY);
    expect(
      parseWorkerCommand(['--role', 'generator', '--concurrency', '3'], { env: {}, cwd: tmp }).concurrency,
    ).toBe(3);
    const help = await pge(['worker', '--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain(
      `Requests a role worker handles at once (default ${DEFAULT_WORKER_CONCURRENCY})`,
    );
  });
});

describe('the servers and replicas of a cluster', () => {
  it('takes the servers of a cluster as repeated --nats flags or one comma-separated list', () => {
    const plan = (...args: string[]) =>
      parseWorkerCommand(['--role', 'planner', ...args], { env: {}, cwd: tmp });
    expect(plan('--nats', 'nats://a:4222', '--nats', 'nats://b:4222').nats.servers).toBe(
      'nats://a:4222,nats://b:4222',
    );
    expect(plan('--nats', 'nats://a:4222,nats://b:4222').nats.servers).toBe('nats://a:4222,nats://b:4222');
  });

  it('takes --replicas from the flag, PGE_REPLICAS or the config file, 1 to 5, and leaves it unset otherwise', async () => {
    const replicas = (args: string[], env: Record<string, string> = {}, dir = tmp) =>
      parseWorkerCommand(['--role', 'coordinator', ...args], { env, cwd: dir }).options.replicas;
    expect(replicas([])).toBeUndefined();
    expect(replicas(['--replicas', '3'])).toBe(3);
    expect(replicas([], { PGE_REPLICAS: '5' })).toBe(5);
    expect(replicas(['--replicas', '1'], { PGE_REPLICAS: '3' })).toBe(1);
    const withFile = mkdtempSync(join(tmpdir(), 'pge-replicas-'));
    try {
      writeFileSync(join(withFile, 'pge.config.json'), JSON.stringify({ replicas: 3 }));
      expect(replicas([], {}, withFile)).toBe(3);
    } finally {
      rmSync(withFile, { recursive: true, force: true });
    }
    expect(await usageError(['worker', '--role', 'coordinator', '--replicas', '7'])).toContain(
      'replicas must be from 1 to 5, got 7',
    );
    expect(() => replicas([], { PGE_REPLICAS: 'three' })).toThrow(/PGE_REPLICAS: replicas/);
  });
});

describe('following a run on NATS', () => {
  it('pge follow needs one run id, a real one, and a --from-seq >= 1', async () => {
    expect(await usageError(['follow'])).toContain("missing required argument 'runId'");
    expect(await usageError(['follow', 'a', 'b'])).toContain(
      "too many arguments for 'follow'. Expected 1 argument but got 2.",
    );
    expect(await usageError(['follow', 'run.1'])).toContain('"run.1" is not a run id');
    expect(await usageError(['follow', 'run-1', '--from-seq', '0'])).toContain('--from-seq must be >= 1');
    expect(await usageError(['follow', 'run-1', '--max-steps', '2'])).toContain(
      "unknown option '--max-steps'",
    );
  });

  it('takes --follow-timeout as a duration for run and follow, and refuses zero', async () => {
    expect(await usageError(['run', 'Write a haiku', '--follow-timeout', '0'])).toContain(
      '--follow-timeout: followTimeoutMs must be > 0',
    );
    expect(await usageError(['follow', 'run-1', '--follow-timeout', 'soon'])).toContain(
      '--follow-timeout expects a duration',
    );
    const help = await pge(['follow', '--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toContain('Usage: pge follow <runId>');
    expect(help.stdout).toMatch(/--follow-timeout <ms> +With --nats: stop following .* \(default 10m\)/s);
  });

  it('takes --submit-timeout as a duration for run only, and refuses zero', async () => {
    expect(await usageError(['run', 'Write a haiku', '--submit-timeout', '0'])).toContain(
      '--submit-timeout: submitTimeoutMs must be > 0',
    );
    expect(await usageError(['follow', 'run-1', '--submit-timeout', '30s'])).toContain('--submit-timeout');
    const help = await pge(['run', '--help']);
    expect(help.stdout).toMatch(
      /--submit-timeout <ms> +With --nats: send the submission again .* \(default 1m\)/s,
    );
  });

  it('pge worker keeps --publish-retry within the streams’ duplicate window', async () => {
    expect(parseWorkerCommand(['--role', 'planner', '--demo'], { env: {}, cwd: tmp }).publishRetryMs).toBe(
      60_000,
    );
    expect(
      parseWorkerCommand(['--role', 'planner', '--publish-retry', '90s'], { env: {}, cwd: tmp })
        .publishRetryMs,
    ).toBe(90_000);
    expect(await usageError(['worker', '--role', 'planner', '--publish-retry', '5m'])).toContain(
      "--publish-retry must be between 1ms and 118s (within the streams' duplicate window)",
    );
  });
});

describe('help', () => {
  it('names every chart pge graph prints, in its summary and its help', async () => {
    const { summary, examples } = COMMAND_HELP.graph;
    expect(summary).toBe('print the session, run or step statechart as Mermaid, DOT or JSON');
    for (const machine of MACHINE_NAMES) expect(summary).toContain(machine);
    expect(examples).toContain('pge graph --machine session');
    const help = await pge(['--help']);
    expect(help.stdout).toMatch(/pge graph \[flags\] +print the session, run or step statechart/);
  });

  it("wraps every command's help at its width, never breaking a line short of it", async () => {
    const helps = await Promise.all(
      [[], ...Object.keys(COMMAND_HELP).map((command) => [command])].map((command) =>
        pge([...command, '--help']),
      ),
    );
    const breaks = helps.flatMap((help) => {
      expect(help.code).toBe(0);
      return shortBreaks(help.stdout);
    });
    expect(breaks).toEqual([]);
  });
});

/** The help's width, as commander wraps it (`program.ts`). */
const HELP_WIDTH = 100;

const indentOf = (line: string) => line.length - line.trimStart().length;

/** A line that starts an item of a list: a flag, an exit code or numbered entry, or a term and its text. */
const startsItem = (line: string) => /^\s*(-|\d+\.?\s|\S.*?\S {2,}\S)/.test(line);

/**
 * Whether `next` carries on the text of `line`: at the same indentation in a paragraph (but after
 * the first line of an item), or hanging under the column where the text of an item starts.
 */
function continues(line: string, next: string): boolean {
  if (line.trim() === '' || next.trim() === '' || line.endsWith(':') || startsItem(next)) return false;
  const indent = indentOf(next);
  if (indent === indentOf(line)) return !startsItem(line);
  return (
    indent > indentOf(line) &&
    /^\s*(\S.*\S {2,}|\d+\.\s)$/.test(line.slice(0, indent)) &&
    line[indent] !== ' '
  );
}

/**
 * The lines of a help text that are too long, or that end a line of a paragraph although the next
 * line's first word would have fitted after it: a sentence broken mid-way ("what" / "its").
 * Examples are one per line.
 */
function shortBreaks(help: string): string[] {
  const lines = help.split('\n');
  const found: string[] = [];
  let examples = false;
  lines.forEach((line, i) => {
    if (line.trim() === '') examples = false;
    if (line === 'Examples:') examples = true;
    if (line.length > HELP_WIDTH) found.push(`too long: ${line}`);
    const next = lines[i + 1];
    if (examples || next === undefined || !continues(line, next)) return;
    const word = next.trimStart().split(' ')[0]!;
    if (line.length + 1 + word.length <= HELP_WIDTH) found.push(`${line}⏎${next}`);
  });
  return found;
}
