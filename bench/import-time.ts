import { spawnSync } from 'node:child_process';
import { rmSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { medianValue } from './measure.js';

/**
 * Section 7: how long `import('pge')` takes in a fresh `node`, beside the floor that no change to
 * pge can lower, importing its two runtime dependencies `xstate` and `zod`. The library is built
 * from the sources into a scratch directory under `node_modules/.cache` (so that its imports
 * resolve as the published package's do) and imported as the package's entry, `dist/index.js`,
 * would be. Each import runs in a new process, the library's alternating with the floor's, so that
 * nothing is cached from one to the next; the figures are medians. The modules pge loads only at
 * first use (the OpenAI SDK, `yaml`) are timed the same way, to show what that first use adds.
 */

const ROOT = join(import.meta.dirname, '..');
const BUILD = join(ROOT, 'node_modules', '.cache', 'pge-bench-import');

/** Median, fastest and slowest of one import's timings, in milliseconds. */
export interface ImportFigures {
  medianMs: number;
  minMs: number;
  maxMs: number;
}

/** Figures of section 7. */
export interface ImportTimeResults {
  runs: number;
  /** `import()` of the built library entry. */
  library: ImportFigures;
  /** `import('xstate')` then `import('zod')`. */
  floor: ImportFigures;
  /** Median of the runs' ratios library / floor (each pair ran side by side). */
  libraryOverFloor: number;
  /** Modules the library loads at their first use, imported alone. */
  atFirstUse: { openai: ImportFigures; yaml: ImportFigures };
}

/** The code a child runs: time the imports, print the milliseconds. */
function program(specifiers: readonly string[]): string {
  const imports = specifiers.map((s) => `await import(${JSON.stringify(s)});`).join(' ');
  return `const t = performance.now(); ${imports} process.stdout.write(String(performance.now() - t));`;
}

/** Milliseconds that a fresh `node` takes to import `specifiers`, one after the other. */
function timeImport(specifiers: readonly string[]): number {
  const child = spawnSync(process.execPath, ['--input-type=module', '-e', program(specifiers)], {
    cwd: ROOT,
    encoding: 'utf8',
  });
  const ms = Number(child.stdout);
  if (child.status !== 0 || !Number.isFinite(ms))
    throw new Error(`import of ${specifiers.join(', ')} failed: ${child.stderr}`);
  return ms;
}

function figures(values: readonly number[]): ImportFigures {
  return { medianMs: medianValue(values), minMs: Math.min(...values), maxMs: Math.max(...values) };
}

/** Compiles `src` to `BUILD` with the project's build settings (no declarations or source maps). */
function build(): void {
  rmSync(BUILD, { recursive: true, force: true });
  const tsc = join(ROOT, 'node_modules', 'typescript', 'bin', 'tsc');
  const args = [
    '-p',
    'tsconfig.build.json',
    '--outDir',
    BUILD,
    '--declaration',
    'false',
    '--sourceMap',
    'false',
  ];
  const child = spawnSync(process.execPath, [tsc, ...args], { cwd: ROOT, encoding: 'utf8' });
  if (child.status !== 0) throw new Error(`building the library failed: ${child.stdout}${child.stderr}`);
}

/** Builds the library, then times `runs` imports of it and of the floor, alternating. */
export function measureImportTime(runs: number): ImportTimeResults {
  build();
  try {
    const entry = pathToFileURL(join(BUILD, 'index.js')).href;
    const library: number[] = [];
    const floor: number[] = [];
    const ratios: number[] = [];
    const openai: number[] = [];
    const yaml: number[] = [];
    for (let i = 0; i < runs; i++) {
      library.push(timeImport([entry]));
      floor.push(timeImport(['xstate', 'zod']));
      ratios.push(library.at(-1)! / floor.at(-1)!);
      openai.push(timeImport(['openai']));
      yaml.push(timeImport(['yaml']));
    }
    return {
      runs,
      library: figures(library),
      floor: figures(floor),
      libraryOverFloor: medianValue(ratios),
      atFirstUse: { openai: figures(openai), yaml: figures(yaml) },
    };
  } finally {
    rmSync(BUILD, { recursive: true, force: true });
  }
}

const ms = (n: number): string => n.toFixed(1);

/** The report's lines for section 7. */
export function importTimeLines(
  r: ImportTimeResults,
  table: (header: readonly string[], rows: readonly (readonly string[])[]) => string,
): string[] {
  const row = (name: string, f: ImportFigures) => [name, ms(f.medianMs), ms(f.minMs), ms(f.maxMs)];
  const { openai, yaml } = r.atFirstUse;
  return [
    `7. Library import time (a fresh node per import, median of ${r.runs}; the library built from src and`,
    '   imported as the package entry, dist/index.js, its imports alternating with the floor’s)',
    table(
      ['import', 'median ms', 'min ms', 'max ms'],
      [
        row('pge (the library entry)', r.library),
        row('floor: xstate + zod', r.floor),
        row('openai alone (at first OpenAI call)', openai),
        row('yaml alone (at first YAML output)', yaml),
      ],
    ),
    `pge / floor (median of the side-by-side pairs' ratios): ${r.libraryOverFloor.toFixed(2)}×`,
    '',
  ];
}
