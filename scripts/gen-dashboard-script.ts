import { mkdirSync, writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { APP_SCRIPT_FILE, bundleAppScript } from '../src/dashboard/app-bundle.js';

/**
 * The second half of `npm run build`: bundles the dashboard's browser code (src/dashboard/browser)
 * into dist/dashboard/app.js, beside the compiled server that serves it as `/app.js`. Nothing of
 * it is committed; run from the sources, the server bundles the same code in memory
 * (`loadAppScript`), and a test holds the built file to the sources.
 */

const ROOT = resolve(import.meta.dirname, '..');
/** Where the bundle is written, relative to the repository. */
export const APP_SCRIPT_PATH = join('dist', 'dashboard', APP_SCRIPT_FILE);

async function main(): Promise<void> {
  mkdirSync(join(ROOT, 'dist', 'dashboard'), { recursive: true });
  writeFileSync(join(ROOT, APP_SCRIPT_PATH), await bundleAppScript());
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) await main();
