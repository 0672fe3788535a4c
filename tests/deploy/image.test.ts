import { execFileSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';

/**
 * The Dockerfile without a Docker engine: its runtime stage is replayed in a temporary folder that
 * stands for the image's /app. Its COPY and RUN instructions are carried out as written, the
 * `npm ci` included, with the build stage's /app being this repository, whose dist the test run's
 * global setup builds with the build stage's own command (`npm run build`). Then the entry point
 * runs: `--help`, and a whole demo run. So an install that fails, a runtime dependency that is only
 * a devDependency, or a file the image lacks fails here.
 */

const ROOT = resolve(import.meta.dirname, '..', '..');
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
  dependencies: Record<string, string>;
  devDependencies: Record<string, string>;
};

interface Instruction {
  op: string;
  args: string;
}

/** The Dockerfile's instructions, continuation lines joined and comments dropped. */
function instructions(text: string): Instruction[] {
  return text
    .replace(/\\\n/g, ' ')
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'))
    .map((line) => {
      const [op, ...rest] = line.split(/\s+/);
      return { op: op!.toUpperCase(), args: rest.join(' ') };
    });
}

/** The stages, each from its FROM to the next. */
function stages(list: readonly Instruction[]): { name: string | null; steps: Instruction[] }[] {
  const found: { name: string | null; steps: Instruction[] }[] = [];
  for (const step of list) {
    if (step.op === 'FROM') found.push({ name: /\sAS\s+(\S+)$/i.exec(step.args)?.[1] ?? null, steps: [] });
    else found.at(-1)?.steps.push(step);
  }
  return found;
}

const DOCKERFILE = instructions(readFileSync(join(ROOT, 'Dockerfile'), 'utf8'));
const [build, runtime] = stages(DOCKERFILE);

let app: string;
let entrypoint: string[];
const env: Record<string, string> = {
  PATH: process.env.PATH ?? '/usr/bin:/bin',
  HOME: process.env.HOME ?? '/root',
};

/** Carries out the runtime stage in `app`; the build stage's /app is this repository. */
function replayRuntimeStage(): void {
  let workdir = '';
  for (const { op, args } of runtime!.steps) {
    if (op === 'ENV') {
      const [name, value] = args.split('=');
      env[name!] = value!;
    } else if (op === 'WORKDIR') {
      expect(args).toBe('/app');
      workdir = app;
    } else if (op === 'COPY') {
      const words = args.split(/\s+/);
      const from = words[0]!.startsWith('--from=') ? words.shift()!.slice('--from='.length) : null;
      const target = join(workdir, words.pop()!);
      for (const source of words) {
        expect(from === null || from === build!.name, `COPY --from=${from}`).toBe(true);
        const path = from === null ? join(ROOT, source) : join(ROOT, source.replace(/^\/app\/?/, ''));
        const name = source.split('/').pop()!;
        cpSync(path, target.endsWith('/') ? join(target, name) : target, { recursive: true });
      }
    } else if (op === 'RUN') {
      execFileSync('sh', ['-c', args], { cwd: workdir, env, stdio: 'pipe', timeout: 240_000 });
    } else if (op === 'ENTRYPOINT') {
      entrypoint = (JSON.parse(args) as string[]).map((word) => word.replace(/^\/app(?=\/)/, app));
    } else {
      throw new Error(`the replay does not know ${op}`);
    }
  }
}

/** Runs the image's entry point with `args`; resolves with its exit code and output. */
function pge(...args: string[]): { status: number; stdout: string; stderr: string } {
  try {
    const stdout = execFileSync(entrypoint[0]!, [...entrypoint.slice(1), ...args], {
      cwd: app,
      env,
      encoding: 'utf8',
      stdio: 'pipe',
    });
    return { status: 0, stdout, stderr: '' };
  } catch (error) {
    const e = error as { status: number; stdout: string; stderr: string };
    return { status: e.status, stdout: e.stdout, stderr: e.stderr };
  }
}

beforeAll(() => {
  app = mkdtempSync(join(tmpdir(), 'pge-image-'));
  replayRuntimeStage();
}, 300_000);
afterAll(() => rmSync(app, { recursive: true, force: true }));

describe('the Dockerfile', () => {
  it('builds dist in a stage of its own, with every dependency, and never falls back to npm install', () => {
    expect(build?.name).toBeTruthy();
    expect(build!.steps.filter((s) => s.op === 'RUN').map((s) => s.args)).toEqual([
      'npm ci --no-audit --no-fund --ignore-scripts',
      'npm run build',
    ]);
    for (const step of DOCKERFILE.filter((s) => s.op === 'RUN')) {
      expect(step.args, 'a fallback hides a failed install').not.toMatch(/\|\||npm install|npm i\b/);
    }
    const ci = readFileSync(join(ROOT, '.ci', 'run'), 'utf8');
    expect(ci.match(/^[^#\n]*\bnpm (ci|install|i)\b.*$/gm)).toEqual([
      'npm ci --no-audit --no-fund || exit 1',
    ]);
  });

  it('installs the runtime dependencies and no devDependency in the image', () => {
    const installed = (name: string) => existsSync(join(app, 'node_modules', name, 'package.json'));
    for (const name of Object.keys(pkg.dependencies)) expect(installed(name), name).toBe(true);
    // A devDependency that a runtime dependency also needs (ajv, say) is in the image as theirs:
    // the lock file marks what only development needs.
    const lock = JSON.parse(readFileSync(join(ROOT, 'package-lock.json'), 'utf8')) as {
      packages: Record<string, { dev?: boolean }>;
    };
    const devOnly = Object.keys(pkg.devDependencies).filter(
      (name) => lock.packages[`node_modules/${name}`]?.dev,
    );
    expect(devOnly.length).toBeGreaterThan(5);
    for (const name of devOnly) expect(installed(name), name).toBe(false);
    expect(readdirSync(join(app, 'dist'))).toContain('index.js');
    expect(existsSync(join(app, 'src')), 'sources in the image').toBe(false);
  });

  it('gives a working pge: --help, and a whole demo run', () => {
    const help = pge('--help');
    expect(help.status).toBe(0);
    expect(help.stdout).toMatch(/Planner-Generator-Evaluator/);
    const runs = join(app, 'runs');
    mkdirSync(runs);
    const demo = pge('demo', '--working-dir', runs, 'Write a haiku about the sea');
    expect(demo.status, demo.stderr).toBe(0);
    const logs = readdirSync(runs).filter((f) => f.startsWith('pge_shared_state_'));
    expect(logs).toHaveLength(1);
    expect(readFileSync(join(runs, logs[0]!), 'utf8')).toContain('### [HARNESS SUMMARY]');
  }, 60_000);
});
