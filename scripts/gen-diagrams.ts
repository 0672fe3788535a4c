import { mkdirSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { DIAGRAM_FILES } from '../src/graph/diagram-files.js';

/**
 * Writes the statecharts generated from the machines: docs/diagrams/{session,run,step}-machine.{mmd,dot}
 * and docs/statecharts.md. Run it after changing a machine: `npx tsx scripts/gen-diagrams.ts`.
 */

const root = resolve(import.meta.dirname, '..');
// All are made before any is written: a machine whose notes are missing leaves the docs untouched.
const files = Object.entries(DIAGRAM_FILES).map(([path, make]) => [path, make()] as const);
for (const [path, text] of files) {
  const file = join(root, path);
  mkdirSync(dirname(file), { recursive: true });
  writeFileSync(file, text);
  process.stdout.write(`wrote ${path}\n`);
}
