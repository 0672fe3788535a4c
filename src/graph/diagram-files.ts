import { readFileSync } from 'node:fs';
import { runMachine } from '../machines/run-machine.js';
import { sessionMachine } from '../machines/session-machine.js';
import { stepMachine } from '../machines/step-machine.js';
import { statechartsDoc } from './statecharts-doc.js';
import { toDot } from './to-dot.js';
import { toMermaid } from './to-mermaid.js';

/**
 * The committed documentation that is generated from the machines. `scripts/gen-diagrams.ts`
 * writes it; `tests/graph/graph.test.ts` fails when the committed files differ from it.
 */

/** The command that regenerates the files, as a stale-file message quotes it. */
export const REGENERATE = 'npx tsx scripts/gen-diagrams.ts';

const MERMAID_HEADER = `%% Generated from src/machines by ${REGENERATE}; do not edit.`;
const DOT_HEADER = `// Generated from src/machines by ${REGENERATE}; do not edit.`;

/** Mermaid comments may not come before the diagram type, so the header goes after it. */
function withMermaidHeader(source: string): string {
  const [type, ...rest] = source.split('\n');
  return [type, MERMAID_HEADER, ...rest].join('\n');
}

/**
 * Every generated file, by path relative to the repository root, with the function that makes
 * its content. Each file is made on its own, so a test can report each one that is stale.
 */
export const DIAGRAM_FILES: Readonly<Record<string, () => string>> = {
  'docs/diagrams/run-machine.mmd': () => withMermaidHeader(toMermaid(runMachine)),
  'docs/diagrams/run-machine.dot': () => `${DOT_HEADER}\n${toDot(runMachine)}`,
  'docs/diagrams/step-machine.mmd': () => withMermaidHeader(toMermaid(stepMachine)),
  'docs/diagrams/step-machine.dot': () => `${DOT_HEADER}\n${toDot(stepMachine)}`,
  'docs/diagrams/session-machine.mmd': () => withMermaidHeader(toMermaid(sessionMachine)),
  'docs/diagrams/session-machine.dot': () => `${DOT_HEADER}\n${toDot(sessionMachine)}`,
  'docs/statecharts.md': () => statechartsDoc(runMachine, stepMachine, sessionMachine),
  'README.md': () => withChartsIn(readFileSync(new URL('../../README.md', import.meta.url), 'utf8')),
};

/**
 * The README with its two generated chart blocks (between `<!-- generated from src/machines: … -->`
 * and `<!-- end generated -->`) replaced by the charts the machines produce now; the prose is kept.
 */
function withChartsIn(readme: string): string {
  const charts: Record<string, string> = {
    'run-machine': withMermaidHeader(toMermaid(runMachine)),
    'step-machine': withMermaidHeader(toMermaid(stepMachine)),
  };
  return readme.replace(
    /(<!-- generated from src\/machines: (run-machine|step-machine) -->\n)[\s\S]*?(\n<!-- end generated -->)/g,
    (_, open: string, name: string, close: string) => `${open}\`\`\`mermaid\n${charts[name]}\n\`\`\`${close}`,
  );
}
