import { readFile } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * The dashboard's browser script, served as `/app.js`: the bundle of src/dashboard/browser (its
 * TypeScript, type-checked against the DOM by its own tsconfig), one classic script. Every piece
 * of run data enters the DOM through `textContent` or as the value of a fixed, harmless attribute,
 * never through `innerHTML`, so model text is shown, not interpreted.
 */

/** The bundle's file name, next to the compiled server in `dist/dashboard`. */
export const APP_SCRIPT_FILE = 'app.js';

/** The browser code as one classic script (an IIFE: the page loads it with `defer`, not as a module). */
export async function bundleAppScript(): Promise<string> {
  // esbuild is a devDependency: imported only where the sources are, never by an installed pge.
  const { build } = await import('esbuild');
  const browser = join(import.meta.dirname, 'browser');
  const result = await build({
    entryPoints: [join(browser, 'app.ts')],
    tsconfig: join(browser, 'tsconfig.json'),
    absWorkingDir: join(import.meta.dirname, '..', '..'),
    bundle: true,
    format: 'iife',
    target: 'es2020',
    charset: 'utf8',
    legalComments: 'none',
    write: false,
    logLevel: 'silent',
  });
  const [file] = result.outputFiles;
  if (!file || result.outputFiles.length !== 1) throw new Error('esbuild made no single bundle');
  return file.text;
}

let loaded: Promise<string> | null = null;

/**
 * The script the server serves. pge runs in two ways, and each finds it where it is: compiled
 * (`node bin/pge.js`, the installed CLI, the image), this module is in dist/dashboard, where
 * `npm run build` wrote the bundle beside it; from the sources (vitest, tsx), this module is in
 * src/dashboard, where no bundle is, and the sources beside it are bundled in memory, once per
 * process, so a change to the page's code shows without a build.
 */
export function loadAppScript(): Promise<string> {
  const path = join(import.meta.dirname, APP_SCRIPT_FILE);
  loaded ??= readFile(path, 'utf8').catch((error: unknown) => {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
    return bundleAppScript().catch((cause: unknown) => {
      throw new Error(`the dashboard's script ${path} is missing (run \`npm run build\`): ${String(cause)}`, {
        cause,
      });
    });
  });
  return loaded;
}
