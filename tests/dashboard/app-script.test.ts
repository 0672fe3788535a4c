import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import {
  APP_SCRIPT_MODULE,
  bundleAppScript,
  renderAppScriptModule,
} from '../../scripts/gen-dashboard-script.js';
import { APP_SCRIPT } from '../../src/dashboard/assets/app-script.js';
import { RunStore } from '../../src/dashboard/run-store.js';
import { startDashboard } from '../../src/dashboard/server.js';
import { ROOT } from './support.js';

/**
 * The page's script is TypeScript in src/dashboard/browser, bundled into a committed string module.
 * These tests hold that module to its sources, and check that pge serves the same bytes as `/app.js`
 * from its sources and from `dist` (the test run's global setup builds `dist` first).
 */

/** `/app.js` as the dashboard of `server` (a module of src/ or of dist/) serves it. */
async function servedScript(server: typeof import('../../src/dashboard/server.js'), store: unknown) {
  const dashboard = await server.startDashboard({ store: store as RunStore });
  try {
    const response = await fetch(`${dashboard.url}app.js`);
    expect(response.headers.get('content-type')).toMatch(/^text\/javascript/);
    return await response.text();
  } finally {
    await dashboard.close();
  }
}

describe('the dashboard script', () => {
  it('is the bundle of src/dashboard/browser as scripts/gen-dashboard-script.ts writes it', async () => {
    const committed = readFileSync(join(ROOT, APP_SCRIPT_MODULE), 'utf8');
    expect(
      committed === (await renderAppScriptModule()),
      `${APP_SCRIPT_MODULE} is out of date: run \`npm run dashboard-script\` and commit the result`,
    ).toBe(true);
    // The string survives its escaping into the module: the served script is the bundle, byte for byte.
    expect(APP_SCRIPT).toBe(await bundleAppScript());
  });

  it('is one classic script with no module syntax, reading run data as text only', () => {
    expect(APP_SCRIPT.startsWith('"use strict";\n(() => {\n')).toBe(true);
    expect(APP_SCRIPT).not.toMatch(/^\s*(import|export)\s/m);
    expect(APP_SCRIPT).not.toMatch(/innerHTML|outerHTML|insertAdjacentHTML|document\.write|eval\(/);
    expect(() => new Function(APP_SCRIPT)).not.toThrow();
  });

  it('is served identically from the sources and from dist', async () => {
    const distServer = join(ROOT, 'dist', 'dashboard', 'server.js');
    expect(existsSync(join(ROOT, 'dist', 'dashboard', 'browser')), 'browser sources in dist').toBe(false);
    const fromDist = (await import(
      pathToFileURL(distServer).href
    )) as typeof import('../../src/dashboard/server.js');
    const distStore = (await import(pathToFileURL(join(ROOT, 'dist', 'dashboard', 'run-store.js')).href)) as {
      RunStore: typeof RunStore;
    };
    const source = await servedScript({ startDashboard }, new RunStore());
    expect(source).toBe(APP_SCRIPT);
    expect(await servedScript(fromDist, new distStore.RunStore())).toBe(source);
  });
});
