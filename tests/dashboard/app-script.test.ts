import { spawn } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  symlinkSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { APP_SCRIPT_PATH } from '../../scripts/gen-dashboard-script.js';
import { bundleAppScript } from '../../src/dashboard/app-bundle.js';
import { RunStore } from '../../src/dashboard/run-store.js';
import { startDashboard } from '../../src/dashboard/server.js';
import { ROOT } from './support.js';

/**
 * The page's script is TypeScript in src/dashboard/browser, bundled by `npm run build` into
 * dist/dashboard/app.js (the test run's global setup builds dist first) and by the server itself,
 * in memory, when pge runs from its sources. These tests hold the built file to the sources, and
 * check that pge serves the same bytes from its sources and from an installed dist, which has no
 * bundler.
 */

let bundle: string;
/** An installed pge: bin, dist and package.json, with every dependency but esbuild. */
let installed: string;
beforeAll(async () => {
  bundle = await bundleAppScript();
  installed = mkdtempSync(join(tmpdir(), 'pge-installed-'));
  for (const part of ['bin', 'dist', 'package.json'])
    cpSync(join(ROOT, part), join(installed, part), { recursive: true });
  mkdirSync(join(installed, 'node_modules'));
  for (const name of readdirSync(join(ROOT, 'node_modules'))) {
    if (name === 'esbuild' || name === '@esbuild' || name === 'tsx' || name === '.bin') continue;
    symlinkSync(join(ROOT, 'node_modules', name), join(installed, 'node_modules', name));
  }
});
afterAll(() => rmSync(installed, { recursive: true, force: true }));

/** `/app.js` as a dashboard serves it. */
async function servedScript(url: string): Promise<string> {
  const response = await fetch(`${url}app.js`);
  expect(response.headers.get('content-type')).toMatch(/^text\/javascript/);
  return await response.text();
}

/** `pge dashboard` of the installed copy on the fixture log; resolves with its exit code, its stderr and `/app.js` if it served. */
async function installedDashboard(): Promise<{ code: number | null; stderr: string; script: string | null }> {
  const log = join(ROOT, 'tests', 'fixtures', 'logs', 'demo-run.md');
  const child = spawn(
    process.execPath,
    [join(installed, 'bin', 'pge.js'), 'dashboard', '--log', log, '--port', '0'],
    {
      cwd: installed,
      env: { PATH: process.env.PATH ?? '/usr/bin:/bin' },
      stdio: ['ignore', 'ignore', 'pipe'],
    },
  );
  let stderr = '';
  const exited = new Promise<number | null>((resolve) => child.on('exit', resolve));
  const listening = new Promise<string | null>((resolve) => {
    child.stderr!.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
      const url = /pge dashboard: (http:\/\/127\.0\.0\.1:\d+\/)/.exec(stderr)?.[1];
      if (url) resolve(url);
    });
    void exited.then(() => resolve(null));
  });
  const url = await listening;
  const script = url === null ? null : await servedScript(url);
  child.kill('SIGTERM');
  return { code: await exited, stderr, script };
}

describe('the dashboard script', () => {
  it('is built into dist by npm run build, as the bundle of src/dashboard/browser, and committed nowhere', () => {
    expect(readFileSync(join(ROOT, APP_SCRIPT_PATH), 'utf8')).toBe(bundle);
    expect(existsSync(join(ROOT, 'src', 'dashboard', 'assets', 'app-script.ts'))).toBe(false);
    expect(existsSync(join(ROOT, 'src', 'dashboard', 'app.js'))).toBe(false);
    expect(existsSync(join(ROOT, 'dist', 'dashboard', 'browser')), 'browser sources in dist').toBe(false);
  });

  it('is one classic script with no module syntax, reading run data as text only', () => {
    expect(bundle.startsWith('"use strict";\n(() => {\n')).toBe(true);
    expect(bundle).not.toMatch(/^\s*(import|export)\s/m);
    expect(bundle).not.toMatch(/innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(/);
    expect(() => new Function(bundle)).not.toThrow();
  });

  it('is served identically from the sources and from an installed dist without esbuild', async () => {
    const dashboard = await startDashboard({ store: new RunStore() });
    try {
      expect(await servedScript(dashboard.url)).toBe(bundle);
    } finally {
      await dashboard.close();
    }
    const served = await installedDashboard();
    expect(served.script, served.stderr).toBe(bundle);
    expect(served.code).toBe(0);
    // Without its built script, the installed pge cannot bundle one: it says so, which shows it read the file.
    rmSync(join(installed, APP_SCRIPT_PATH));
    const missing = await installedDashboard();
    expect(missing.script).toBeNull();
    expect(missing.code).not.toBe(0);
    expect(missing.stderr).toContain(
      `${join(installed, APP_SCRIPT_PATH)} is missing (run \`npm run build\`)`,
    );
  }, 60_000);
});
