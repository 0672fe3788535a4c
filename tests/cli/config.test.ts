import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { describeConfig, resolveConfig } from '../../src/cli/config.js';
import { parseCommandLine } from '../../src/cli/flags.js';
import type { CliIo } from '../../src/cli/io.js';
import { main } from '../../src/cli/main.js';
import { parseWorkerCommand } from '../../src/cli/worker-process.js';
import { ConfigurationError } from '../../src/errors.js';

/** Flags, environment and config file, resolved in-process: the rules behind `pge config` and `pge run`. */

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'pge-cli-config-'));
});
afterEach(() => {
  rmSync(dir, { recursive: true, force: true });
});

const flags = (...argv: string[]) => parseCommandLine('run', argv).flags;
const resolveIn = (argv: string[], env: Record<string, string> = {}) =>
  resolveConfig({ flags: flags(...argv), env, cwd: dir });

function fakeIo(env: Record<string, string> = {}): CliIo & { out: () => string; err: () => string } {
  let out = '';
  let err = '';
  return {
    stdout: { write: (text: string) => (out += text) },
    stderr: { write: (text: string) => (err += text) },
    env,
    cwd: dir,
    out: () => out,
    err: () => err,
  };
}

describe('flag values', () => {
  it('converts numbers, durations, choices and repeated thresholds', () => {
    const { options, json } = flags(
      '--max-steps=4',
      '--max-cost',
      '0.25',
      '--timeout',
      '30s',
      '--max-duration',
      '1500',
      '--on-exhausted',
      'replan',
      '--threshold',
      ' Accuracy =8',
      '--threshold',
      'clarity=7.5',
      '--json',
    );
    expect(options).toEqual({
      maxSteps: 4,
      maxCostUsd: 0.25,
      timeoutMs: 30_000,
      maxDurationMs: 1500,
      onStepExhausted: 'replan',
      defaultThresholds: { accuracy: 8, clarity: 7.5 },
    });
    expect(json).toBe(true);
  });

  it.each([
    [['--max-steps', '1.5'], '--max-steps expects an integer >= 0, got "1.5"'],
    [['--max-tokens', '0x10'], '--max-tokens expects an integer >= 0, got "0x10"'],
    [['--temperature', ''], '--temperature expects a number, got ""'],
    [['--timeout', '5 minutes'], '--timeout expects a duration'],
    [['--threshold', 'accuracy'], '--threshold expects <criterion>=<score>'],
    [['--threshold', 'accuracy=0'], 'a threshold must be between 1 and 10'],
    [['--structured-output', 'xml'], 'one of json_schema, json_object, prompt'],
  ])('rejects %j', (argv, message) => {
    expect(() => flags(...argv)).toThrow(ConfigurationError);
    expect(() => flags(...argv)).toThrow(message);
  });

  it('reads sizes with a binary unit, durations in days, and gives the stream limits to pge worker only', () => {
    expect(flags('--max-task-bytes', '512K').options).toEqual({ maxTaskBytes: 512 * 1024 });
    expect(flags('--max-task-bytes=1000').options).toEqual({ maxTaskBytes: 1000 });
    const worker = (...argv: string[]) =>
      parseWorkerCommand(['--role', 'coordinator', ...argv], { env: {}, cwd: dir }).options;
    const limits = worker('--stream-max-age', '7d', '--stream-max-bytes', '1.5GiB');
    expect({ streamMaxAgeMs: limits.streamMaxAgeMs, streamMaxBytes: limits.streamMaxBytes }).toEqual({
      streamMaxAgeMs: 7 * 86_400_000,
      streamMaxBytes: 1.5 * 1024 ** 3,
    });
    expect(() => flags('--max-task-bytes', '1x')).toThrow(
      '--max-task-bytes expects a size in bytes (or with a unit: 512K, 10MiB, 1G), got "1x"',
    );
    expect(() => flags('--stream-max-age', '1d')).toThrow(/pge run does not take --stream-max-age/);
    expect(() => worker('--stream-max-age', '1m')).toThrow(
      /--stream-max-age: streamMaxAgeMs must be 0 \(no limit\) or at least 120000 \(the duplicate window\), got 60000/,
    );
  });

  it('reads a fixed rubric from the file --rubric names, an array or an object with criteria', () => {
    const rubric = [{ name: 'correctness', weight: 'high', description: 'it runs', threshold: 8 }];
    writeFileSync(join(dir, 'rubric.json'), JSON.stringify(rubric));
    writeFileSync(join(dir, 'wrapped.json'), JSON.stringify({ criteria: rubric }));
    expect(resolveIn(['--rubric', 'rubric.json']).options.criteria).toEqual(rubric);
    expect(resolveIn(['--rubric', 'wrapped.json']).options.criteria).toEqual(rubric);
    expect(() => resolveIn(['--rubric', 'missing.json'])).toThrow(
      /--rubric: cannot read .*missing\.json: ENOENT/,
    );
    writeFileSync(join(dir, 'bad.json'), JSON.stringify([{ name: 'x' }]));
    expect(() => resolveIn(['--rubric', 'bad.json'])).toThrow(ConfigurationError);
    // A file with no array of criteria is refused, not taken as no rubric.
    for (const [file, content] of [
      ['object.json', { name: 'x' }],
      ['text.json', 'hello'],
      ['null.json', null],
    ] as const) {
      writeFileSync(join(dir, file), JSON.stringify(content));
      expect(() => resolveIn(['--rubric', file])).toThrow(
        new RegExp(`--rubric: .*${file.replace('.', '\\.')} holds no criteria`),
      );
    }
    // A rubric names each criterion once (names compare trimmed and in lower case).
    writeFileSync(
      join(dir, 'twice.json'),
      JSON.stringify([...rubric, { ...rubric[0], name: ' Correctness' }]),
    );
    expect(() => resolveIn(['--rubric', 'twice.json'])).toThrow(/duplicate criterion "correctness"/);
  });

  it('reads the plan --plan or a config file names, a path in the file relative to it', () => {
    const plan = {
      version: 1,
      task: 'a task',
      steps: [{ id: 'a', title: 'A', description: 'do a', expectedOutput: 'a' }],
      criteria: [{ name: 'accuracy' }],
    };
    mkdirSync(join(dir, 'team', 'plans'), { recursive: true });
    writeFileSync(join(dir, 'team', 'plans', 'p.json'), JSON.stringify(plan));
    const fromFlag = resolveIn(['--plan', 'team/plans/p.json']).options.plan;
    expect(fromFlag).toMatchObject({
      file: join(dir, 'team', 'plans', 'p.json'),
      document: { task: 'a task' },
    });
    writeFileSync(join(dir, 'team', 'pge.config.json'), JSON.stringify({ plan: 'plans/p.json' }));
    expect(resolveIn(['--config', 'team/pge.config.json']).options.plan).toEqual(fromFlag);
    writeFileSync(join(dir, 'team', 'plans', 'p.json'), JSON.stringify({ ...plan, version: 3 }));
    for (const argv of [
      ['--plan', 'team/plans/p.json'],
      ['--config', 'team/pge.config.json'],
    ])
      expect(() => resolveIn(argv)).toThrow(
        `${join(dir, 'team', 'plans', 'p.json')}: version: this pge reads plan documents of version 1, not 3`,
      );
  });

  it('reads MCP servers for both acting roles or one, a command or a URL, into one record; --no-tools turns tools off', () => {
    const { options } = flags(
      '--mcp',
      'files=npx -y some-mcp-server --root .',
      '--evaluator-mcp',
      'browser=http://127.0.0.1:8931/mcp',
      '--generator-mcp=lint=node lint-server.js',
      '--no-tools',
    );
    expect(options).toEqual({
      tools: false,
      mcpServers: {
        files: {
          command: 'npx',
          args: ['-y', 'some-mcp-server', '--root', '.'],
          roles: ['generator', 'evaluator'],
        },
        browser: { url: 'http://127.0.0.1:8931/mcp', roles: ['evaluator'] },
        lint: { command: 'node', args: ['lint-server.js'], roles: ['generator'] },
      },
    });
    expect(() => flags('--mcp', 'no-equals-sign')).toThrow(ConfigurationError);
    expect(() => flags('--mcp', 'bad.name=cmd')).toThrow(/is not <name>=<command …> or <name>=<url>/);
  });

  it('does not read values when --help is given', () => {
    expect(parseCommandLine('run', ['--max-steps', 'many', '--help']).help).toBe(true);
  });

  it('takes a value that starts with "-" only after "=", and nothing after "--" as a flag', () => {
    expect(flags('--model=-odd', '--temperature', '-0.5').options).toEqual({
      modelName: '-odd',
      temperature: -0.5,
    });
    expect(() => flags('--model', '-odd')).toThrow(
      '--model needs a value: --model <name>; a value that starts with "-" goes after "=": --model=-odd',
    );
    expect(() => flags('--max-steps')).toThrow('--max-steps needs a value: --max-steps <n>');
    expect(() => flags('--json=yes')).toThrow('--json takes no value');
    const line = parseCommandLine('run', ['--json', '--', '--help', '--max-steps']);
    expect(line.help).toBe(false);
    expect(line.positionals).toEqual(['--help', '--max-steps']);
    expect(line.flags.json).toBe(true);
  });

  it('suggests the flag a typo meant among the command’s own, and names a flag of another command', () => {
    expect(() => flags('--max-retires', '2')).toThrow(
      /^unknown flag --max-retires; did you mean --max-retries\?$/,
    );
    expect(() => parseCommandLine('graph', ['--nats', 'x'])).toThrow(/^pge graph does not take --nats$/);
    expect(() => flags('--zzzzzzzz')).toThrow(/^unknown flag --zzzzzzzz$/);
  });

  it('gives pge demo no flag that configures a model server', () => {
    expect(() => parseCommandLine('demo', ['--base-url', 'http://x'])).toThrow(
      /pge demo does not take --base-url/,
    );
    expect(parseCommandLine('demo', ['--max-retries', '1']).flags.options).toEqual({ maxRetriesPerStep: 1 });
  });
});

describe('resolveConfig', () => {
  it('takes flags over env over the config file over defaults, each with its source', () => {
    writeFileSync(
      join(dir, 'pge.config.json'),
      JSON.stringify({ modelName: 'file', maxSteps: 3, maxReplans: 2 }),
    );
    const c = resolveIn(['--max-steps', '5'], { PGE_MODEL: 'env', OPENAI_BASE_URL: '' });
    expect(c.options).toMatchObject({ modelName: 'env', maxSteps: 5, maxReplans: 2, outputType: 'final' });
    expect(c.sources).toMatchObject({
      modelName: 'env',
      maxSteps: 'flag',
      maxReplans: 'config file',
      baseURL: 'default',
      outputType: 'CLI default',
    });
    expect(c.configFile).toBe(join(dir, 'pge.config.json'));
  });

  it('reads paths in a config file relative to the file, and flag paths relative to the cwd', () => {
    mkdirSync(join(dir, 'conf'));
    writeFileSync(join(dir, 'conf', 'team.json'), JSON.stringify({ workingDirectory: 'runs' }));
    const c = resolveIn(['--config', 'conf/team.json', '--log', 'out/run.md']);
    expect(c.options.workingDirectory).toBe(join(dir, 'conf', 'runs'));
    expect(c.options.sharedStatePath).toBe(join(dir, 'out', 'run.md'));
  });

  it.each([
    ['{ "maxSteps": ', /is not valid JSON/],
    ['[1, 2]', /must hold a JSON object/],
    ['{ "maxSteps": "3" }', /pge\.config\.json: maxSteps: Invalid input: expected number/],
    ['{ "maxSteps": 0 }', /pge\.config\.json: maxSteps must be >= 1, got 0/],
    ['{ "plannerAgent": {} }', /plannerAgent can be set only through the API/],
    ['{ "roleSettings": { "critic": {} } }', /roleSettings/],
  ])('rejects the config file %s', (text, message) => {
    writeFileSync(join(dir, 'pge.config.json'), text);
    expect(() => resolveIn([])).toThrow(message);
  });

  it('rejects a --config file that does not exist, but not a missing pge.config.json', () => {
    expect(() => resolveIn(['--config', 'nope.json'])).toThrow(/nope\.json does not exist/);
    expect(resolveIn([]).configFile).toBeNull();
  });

  it('names the flag that holds a bad value', () => {
    expect(() => resolveIn(['--max-steps', '0'])).toThrow('--max-steps: maxSteps must be >= 1, got 0');
  });

  it('reads neither env nor config file for the demo', () => {
    writeFileSync(join(dir, 'pge.config.json'), '{ "nonsense": true }');
    const c = resolveConfig({ flags: flags(), env: { PGE_MODEL: 'env' }, cwd: dir, flagsOnly: true });
    expect(c.options).toEqual({ outputType: 'final' });
  });

  it('never shows the API key, and shows a base URL without its credentials', () => {
    writeFileSync(join(dir, 'pge.config.json'), JSON.stringify({ apiKey: 'sk-from-file-123456' }));
    const c = resolveIn(['--base-url', 'https://user:hunter2@proxy.example/v1?key=query-secret']);
    const lines = describeConfig(c, dir);
    const text = JSON.stringify(lines);
    expect(lines.find((l) => l.key === 'apiKey')).toEqual({
      key: 'apiKey',
      value: '(set)',
      source: 'config file',
    });
    expect(lines.find((l) => l.key === 'baseURL')?.value).toBe('https://proxy.example/v1');
    // Each long enough not to turn up by chance in a random id.
    for (const secret of ['sk-from-file', 'hunter2', 'query-secret']) expect(text).not.toContain(secret);
    expect(lines.find((l) => l.key === 'workingDirectory')).toMatchObject({ value: dir, source: 'default' });
  });
});

describe('main in-process', () => {
  it('prints the configuration as JSON with pge config --json', async () => {
    const io = fakeIo({ OPENAI_API_KEY: 'sk-in-process-secret' });
    expect(await main(['config', '--json', '--max-retries', '1'], io)).toBe(0);
    const shown = JSON.parse(io.out());
    expect(shown.options.maxRetriesPerStep).toEqual({ value: 1, source: 'flag' });
    expect(shown.options.apiKey).toEqual({ value: '(set)', source: 'env' });
    expect(shown.options.maxCostUsd).toEqual({ value: null, source: 'default' });
    expect(io.out()).not.toContain('sk-in-process-secret');
  });

  it.each([
    [['help', 'batch'], 0, /^Usage: pge batch <file>/],
    [['help'], 0, /^pge: a Planner-Generator-Evaluator harness/],
    [['help', 'nope'], 2, /no help for "nope"/],
    [['--max-steps', '3'], 2, /unknown flag --max-steps \(flags go after the command\)/],
  ])('pge %j exits %i', async (argv, code, text) => {
    const io = fakeIo();
    expect(await main(argv, io)).toBe(code);
    expect(code === 0 ? io.out() : io.err()).toMatch(text);
  });

  it('answers pge with no command with the help on stderr and exit code 2', async () => {
    const io = fakeIo();
    expect(await main([], io)).toBe(2);
    expect(io.err()).toContain('Usage:');
    expect(io.out()).toBe('');
  });
});
