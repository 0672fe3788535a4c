import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { parse as parseYaml } from 'yaml';
import { type FakeOpenAI, startFakeOpenAI } from '../support/fake-openai-server.js';
import { ARTIFACT, logsIn, ROOT, runCli, SECRET, type SpawnOptions, scripted } from './run-cli.js';

/**
 * The CLI as a user meets it: `node bin/pge.js …` in a child process, its exit code, stdout, stderr
 * and the log it leaves. Model runs talk to the scriptable fake OpenAI server over real HTTP.
 */

/** Runs the CLI in the test's scratch directory. */
const pge = (args: string[], options: Partial<SpawnOptions> = {}) => runCli(args, { cwd: tmp, ...options });

/** Every file under a directory, as text. */
function filesUnder(dir: string): string {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((d) => d.isFile())
    .map((d) => readFileSync(join(d.parentPath, d.name), 'utf8'))
    .join('\n');
}

let tmp: string;
let server: FakeOpenAI;

beforeAll(async () => {
  // The CLI runs from dist, as installed: the global setup builds it once for every file.
  server = await startFakeOpenAI();
}, 120_000);

afterAll(async () => {
  await server?.close();
});

beforeEach(() => {
  tmp = mkdtempSync(join(tmpdir(), 'pge-cli-'));
  server.reset();
});

afterEach(() => {
  rmSync(tmp, { recursive: true, force: true });
});

describe('pge demo', () => {
  it('runs offline, says it is a demo model, shows a refine and a pivot, and writes the log', async () => {
    const r = await pge(['demo', '--working-dir', tmp], { env: { OPENAI_API_KEY: '' } });
    expect(r.code).toBe(0);
    expect(r.stderr.split('\n')[0]).toMatch(/demo model.*not an AI/);
    expect(r.stderr).toMatch(/step 1\/4 retry: attempt 2 will refine/);
    expect(r.stderr).toMatch(/step 2\/4 retry: attempt 3 will pivot/);
    // Steps 1 and 2 depend on nothing: both start before either ends.
    expect(r.stderr).toMatch(/step 1\/4 started.*step 2\/4 started.*step 1\/4 passed/s);
    // The demo's validator fails step 3's first draft, and the evaluator never sees it.
    expect(r.stderr).toMatch(/step 3\/4 attempt 1: work delivered; validator "titledDeliverable" failed/);
    expect(r.stderr).toMatch(/step 3\/4 attempt 1 failed \(failed validation\)\n/);
    expect(r.stderr).toMatch(/run passed: 4\/4 steps passed/);
    const [log] = logsIn(tmp);
    expect(log).toBeDefined();
    const path = join(tmp, log!);
    expect(r.stdout).toContain(path);
    expect(r.stdout).toContain('## Step 3: Write the deliverable');
    expect(readFileSync(path, 'utf8').startsWith('# PGE Harness Shared State')).toBe(true);
    expect(server.requests).toHaveLength(0);
  });

  it('prints the result object as JSON with --json', async () => {
    const r = await pge(['demo', 'Plan a picnic', '--working-dir', tmp, '--json']);
    expect(r.code).toBe(0);
    const result = JSON.parse(r.stdout);
    expect(result.passed).toBe(true);
    // 1 refine in step 1, a refine and a pivot in step 2, 1 retry after the validator in step 3.
    expect(result.totalRetries).toBe(4);
    expect(result.plan.scope).toContain('Plan a picnic');
    expect(existsSync(result.outputPath)).toBe(true);
  });

  it('keeps stdout to the document alone with a document output type, the summary on stderr', async () => {
    const json = await pge(['demo', '--working-dir', tmp, '--output-type', 'json']);
    expect(json.code, json.stderr).toBe(0);
    // The transcript: every message of the run, the user's task first.
    expect(JSON.parse(json.stdout)[0]).toMatchObject({ role: 'User' });
    expect(json.stderr).toMatch(/PGE Harness completed: 4\/4 steps passed.*Shared state: /);
    const yaml = await pge(['demo', '--working-dir', tmp, '--output-type', 'yaml']);
    expect(yaml.code, yaml.stderr).toBe(0);
    expect(parseYaml(yaml.stdout)[0]).toMatchObject({ role: 'User' });
    // The artifact is text: the summary follows it on stdout.
    const final = await pge(['demo', '--working-dir', tmp]);
    expect(final.stdout).toMatch(/\n\nPGE Harness completed: 4\/4 steps passed.*Shared state: /);
  });

  it("refuses --validate for a run on NATS: validators are the generator workers'", async () => {
    const r = await pge(['run', 'a task', '--validate', 'true', '--nats', 'nats://127.0.0.1:1']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('give it to `pge worker --role generator`');
  });

  it('replays a recorded run from its log with no model call: pge replay', async () => {
    const fixture = join(ROOT, 'tests/fixtures/logs/demo-run.md');
    const r = await pge(['replay', fixture, '--json']);
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ identical: true, modelCalls: 0, firstDifference: null });
    const said = await pge(['replay', fixture]);
    expect(said.stdout).toMatch(
      /^identical: the replay of run pge-\S+ produced its 95 recorded events, with 0 model calls\n$/,
    );
    expect(server.requests).toHaveLength(0);
  });

  it('forks a recorded demo run from its third step: pge fork', async () => {
    const fixture = join(ROOT, 'tests/fixtures/logs/demo-run.md');
    const r = await pge(['fork', fixture, '--from-step', '3', '--log', join(tmp, 'fork.md'), '--json']);
    expect(r.code, r.stderr).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ passed: true, outputPath: join(tmp, 'fork.md') });
    expect(readFileSync(join(tmp, 'fork.md'), 'utf8')).toContain('- **Forked from**: run pge-');
    const missing = await pge(['fork', fixture]);
    expect(missing.code).toBe(2);
    expect(missing.stderr).toContain('--from-step <n>');
    // Steps count from 1, and the flag says so whatever it is given.
    for (const given of ['0', 'abc']) {
      const bad = await pge(['fork', fixture, '--from-step', given]);
      expect(bad.code).toBe(2);
      expect(bad.stderr).toContain(`--from-step expects an integer >= 1, got "${given}"`);
    }
  });

  it('refuses --approve with no terminal to ask on, and a gate it does not know', async () => {
    const r = await pge(['demo', '--approve', 'plan,step', '--working-dir', tmp]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--approve asks on the terminal, and this process has none');
    const bad = await pge(['demo', '--approve', 'plan,review']);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('some of plan, contract, step, comma-separated, each once');
  });

  it('refuses flags that configure a model server', async () => {
    const r = await pge(['demo', '--model', 'gpt-4.1']);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("Run 'pge demo --help'");
  });
});

describe('pge run against an OpenAI-compatible server', () => {
  it('passes when every criterion meets its threshold: exit 0, artifact on stdout, log written', async () => {
    server.script(scripted(9));
    const r = await pge([
      'run',
      'Write a haiku about rain',
      '--base-url',
      server.url,
      '--model',
      'test-model',
      '--working-dir',
      tmp,
    ]);
    expect(r.code).toBe(0);
    expect(r.stdout.startsWith(`## Step 1: Write the haiku\n\n${ARTIFACT}`)).toBe(true);
    expect(r.stderr).toMatch(/step 1\/1 attempt 1 passed: accuracy 9\/6 ✓, imagery 9\/7 ✓/);
    const [log] = logsIn(tmp);
    expect(r.stdout).toContain(join(tmp, log!));
    expect(readFileSync(join(tmp, log!), 'utf8')).toContain('[STEP 1 EVALUATION]');
    const schemas = server
      .completions()
      .map(
        (q) =>
          (q.body as { response_format: { json_schema: { name: string } } }).response_format.json_schema.name,
      );
    expect(schemas).toEqual([
      'pge_plan',
      'pge_contract',
      'pge_contract_review',
      'pge_work',
      'pge_evaluation',
    ]);
    expect(server.completions().every((q) => (q.body as { model: string }).model === 'test-model')).toBe(
      true,
    );
  });

  it('exits 1 when a step fails its thresholds and has no retries left', async () => {
    server.script(scripted(4));
    const r = await pge([
      'run',
      'Write a haiku',
      '--base-url',
      server.url,
      '--max-retries',
      '0',
      '--working-dir',
      tmp,
      '--json',
    ]);
    expect(r.code).toBe(1);
    const result = JSON.parse(r.stdout);
    expect(result.passed).toBe(false);
    expect(result.stepLogs[0].attempts).toHaveLength(1);
    expect(r.stderr).toMatch(/step 1\/1 failed after 1 attempt/);
  });

  it('exits 3 on a rejected key, explains it, and never shows the key', async () => {
    server.script(() => ({ status: 401, error: { message: `Incorrect API key provided: ${SECRET}` } }));
    const r = await pge(['run', 'Write a haiku', '--base-url', server.url, '--working-dir', tmp]);
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/rejected the API key \(401\)/);
    expect(r.stderr).toContain('OPENAI_API_KEY');
    expect(server.completions()[0]?.headers.authorization).toBe(`Bearer ${SECRET}`);
    for (const text of [r.stdout, r.stderr, filesUnder(tmp)]) expect(text).not.toContain(SECRET);
    expect(filesUnder(tmp)).toContain('# PGE Harness Shared State');
  });

  it('exits 3 when the server keeps failing, after --max-model-retries retries', async () => {
    server.script(() => ({ status: 500, headers: { 'retry-after-ms': '10' } }));
    const r = await pge([
      'run',
      'Write a haiku',
      '--base-url',
      server.url,
      '--max-model-retries',
      '1',
      '--working-dir',
      tmp,
    ]);
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/failed \(500\) after 2 attempts/);
    expect(server.completions()).toHaveLength(2);
  });

  it('exits 130 on SIGINT; the run ends as interrupted and its log says so', async () => {
    server.script((body) => ({ ...scripted(9)(body), delayMs: 800 }));
    let sent = false;
    const r = await pge(['run', 'Write a haiku', '--base-url', server.url, '--working-dir', tmp], {
      onStderr: (child, stderr) => {
        if (!sent && stderr.includes('started; log:')) {
          sent = true;
          child.kill('SIGINT');
        }
      },
    });
    expect(r.code).toBe(130);
    expect(r.stderr).toMatch(/run stopped \(interrupted\)/);
    expect(r.stdout).toMatch(/PGE Harness stopped \(interrupted\)/);
    expect(readFileSync(join(tmp, logsIn(tmp)[0]!), 'utf8')).toContain('[HARNESS SUMMARY]');
  });

  it('exits 2 without an API key for a remote server', async () => {
    const r = await pge(['run', 'Write a haiku'], { env: { OPENAI_API_KEY: '' } });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/OPENAI_API_KEY is not set/);
  });
});

describe('pge batch', () => {
  it('runs each task with its own log and prints one line per task', async () => {
    server.script(scripted(9));
    writeFileSync(
      join(tmp, 'tasks.txt'),
      '# haiku batch\nWrite a haiku about rain\n\nWrite a haiku about snow\n',
    );
    const r = await pge(['batch', 'tasks.txt', '--base-url', server.url, '--working-dir', tmp]);
    expect(r.code).toBe(0);
    const lines = r.stdout.trim().split('\n');
    expect(lines).toHaveLength(3);
    expect(lines[0]).toMatch(/^\[1\/2\] passed .*"Write a haiku about rain"/);
    expect(lines[1]).toMatch(/^\[2\/2\] passed .*"Write a haiku about snow"/);
    expect(lines[2]).toBe('batch: 2 tasks: 2 passed');
    expect(logsIn(tmp)).toHaveLength(2);
  });

  it('exits with the worst code and skips the rest after a refused request', async () => {
    server.script(() => ({ status: 401 }));
    writeFileSync(join(tmp, 'tasks.txt'), 'one\ntwo\n');
    const r = await pge(['batch', 'tasks.txt', '--base-url', server.url, '--working-dir', tmp]);
    expect(r.code).toBe(3);
    expect(r.stdout).toMatch(/\[1\/2\] error .*401/);
    expect(r.stdout).toMatch(/\[2\/2\] skipped/);
  });
});

describe('the task limits', () => {
  it('refuse a task over --max-task-bytes or the config file’s maxTaskBytes before any call: exit 2', async () => {
    server.script(scripted(9));
    const flagged = await pge(['run', 'x'.repeat(2000), '--max-task-bytes', '1K', '--base-url', server.url]);
    expect(flagged.code).toBe(2);
    expect(flagged.stderr).toMatch(/the task is 2000 bytes, more than maxTaskBytes allows \(1024\)/);
    writeFileSync(join(tmp, 'pge.config.json'), JSON.stringify({ maxTaskBytes: 100 }));
    const configured = await pge(['run', 'y'.repeat(101), '--base-url', server.url]);
    expect(configured.code).toBe(2);
    expect(configured.stderr).toMatch(/the task is 101 bytes, more than maxTaskBytes allows \(100\)/);
    expect(server.completions()).toHaveLength(0);
    expect(logsIn(tmp)).toEqual([]);
  });

  it('refuse a batch whose file holds a task over 256 KiB or a NUL before its first task runs', async () => {
    server.script(scripted(9));
    writeFileSync(join(tmp, 'long.txt'), `Write a haiku about rain\n${'z'.repeat(256 * 1024 + 1)}\n`);
    const long = await pge(['batch', 'long.txt', '--base-url', server.url]);
    expect(long.code).toBe(2);
    expect(long.stderr).toMatch(
      /task 2 of .*long\.txt: the task is 262145 bytes, more than maxTaskBytes allows/,
    );
    writeFileSync(join(tmp, 'binary.txt'), 'Write a haiku about rain\nPK\u0003\u0004\u0000\u0000\n');
    const binary = await pge(['batch', 'binary.txt', '--base-url', server.url]);
    expect(binary.code).toBe(2);
    expect(binary.stderr).toMatch(/task 2 of .*binary\.txt: the task holds a NUL character/);
    expect(server.completions()).toHaveLength(0);
    expect(logsIn(tmp)).toEqual([]);
  });
});

describe('usage and configuration errors exit 2', () => {
  it.each([
    [['run', 'task', '--frobnicate'], /unknown flag --frobnicate$/m],
    [['run', 'task', '--max-steps', '0'], /maxSteps must be >= 1/],
    [['run', 'task', '--threshold', 'accuracy=11'], /threshold must be between 1 and 10/],
    [['run', 'task', '--max-retries', 'two'], /--max-retries expects an integer >= 0, got "two"/],
    [['run', 'task', '--on-exhausted', 'panic'], /--on-exhausted expects one of advance, abort, replan/],
    [['run'], /needs a task/],
    [['launch'], /unknown command 'launch'/],
  ])('pge %j', async (args, message) => {
    const r = await pge(args);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(message);
    expect(r.stderr).toMatch(/Run 'pge (run )?--help' for usage/);
    expect(r.stdout).toBe('');
  });
});

describe('pge config', () => {
  it('shows a flag as the source of a value and never the key', async () => {
    const r = await pge(['config', '--model', 'x']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain('modelName: x (flag)');
    expect(r.stdout).toContain('apiKey: (set) (env)');
    expect(r.stdout).toContain('maxSteps: 10 (default)');
    expect(r.stdout).not.toContain(SECRET);
  });

  it('applies flags over the environment over the config file over defaults', async () => {
    writeFileSync(
      join(tmp, 'pge.config.json'),
      JSON.stringify({
        modelName: 'from-file',
        maxSteps: 4,
        defaultThresholds: { accuracy: 8 },
        workingDirectory: 'runs',
      }),
    );
    const env = { PGE_MODEL: 'from-env' };
    const r = await pge(['config', '--threshold', 'clarity=7'], { env });
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`Config file: ${join(tmp, 'pge.config.json')}`);
    expect(r.stdout).toContain('modelName: from-env (env)');
    expect(r.stdout).toContain('maxSteps: 4 (config file)');
    expect(r.stdout).toContain(`workingDirectory: ${join(tmp, 'runs')} (config file)`);
    expect(r.stdout).toContain('defaultThresholds: {"accuracy":8,"clarity":7} (flag + config file)');
    expect(r.stdout).toContain('maxRetriesPerStep: 3 (default)');
    const flagged = await pge(['config', '--model', 'from-flag', '--max-steps', '2'], { env });
    expect(flagged.stdout).toContain('modelName: from-flag (flag)');
    expect(flagged.stdout).toContain('maxSteps: 2 (flag)');
  });

  it('rejects an unknown key in the config file', async () => {
    writeFileSync(join(tmp, 'pge.config.json'), JSON.stringify({ maxSteps: 4, max_steps: 4 }));
    const r = await pge(['config']);
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/unknown option max_steps/);
  });
});

describe('help and version', () => {
  it('prints the top-level help with examples', async () => {
    const r = await pge(['--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/pge run "<task>"/);
    expect(r.stdout).toMatch(/Exit codes:[\s\S]*130/);
    expect(r.stdout).toMatch(/Examples:\n {2}pge demo/);
  });

  it.each(['run', 'demo', 'batch', 'config'])('prints the help of pge %s with examples', async (command) => {
    const r = await pge([command, '--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toContain(`Usage: pge ${command}`);
    expect(r.stdout).toMatch(new RegExp(`Examples:\\n {2}(\\w+=\\S+ )?pge ${command}`));
  });

  it("lists pge continue's own exit codes, each refusal it makes under 2", async () => {
    const r = await pge(['continue', '--help']);
    expect(r.code).toBe(0);
    const codes = r.stdout.slice(r.stdout.indexOf('Exit codes:'), r.stdout.indexOf('Examples:'));
    expect(codes.match(/^ {2}\d+/gm)).toEqual(['  0', '  1', '  2', '  3', '  130']);
    for (const said of [
      '0    every step of the new run passed',
      '1    the new run finished with failed steps',
      'resume it with pge resume <log>',
      'nothing left to do',
      '3    the new run could not complete',
    ])
      expect(codes).toContain(said);
    // Wherever the help's width breaks its line.
    expect(codes.replace(/\s+/g, ' ')).toContain(
      'a run id the events stream holds no event of, or a run that has not ended',
    );
  });

  it('prints the version', async () => {
    const r = await pge(['--version']);
    expect(r.code).toBe(0);
    const { version } = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8'));
    expect(r.stdout.trim()).toBe(version);
  });
});
