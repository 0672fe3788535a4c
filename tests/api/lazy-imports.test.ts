import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { describe, expect, it } from 'vitest';
import { ROOT } from '../support/processes.js';

/**
 * Importing the library loads no module that a run may never use: the OpenAI SDK loads at the
 * first OpenAI call, `yaml` at the first YAML output; NATS, the Stately inspector, the CLI, the
 * dashboard and the graph exporters only with the code that uses them. Checked in a fresh `node`: a resolve hook refuses those packages (an
 * eager `import` of one fails the import of the entry), and what the CommonJS loader loaded is
 * looked at too (`yaml` is CommonJS, and a `require` does not pass through the ESM hooks on Node 20).
 */

const LAZY = [
  'openai',
  'yaml',
  '@nats-io/transport-node',
  '@nats-io/jetstream',
  '@statelyai/inspect',
  // Tracing costs nothing unless asked for (the `tracer` option, or OTEL_EXPORTER_OTLP_ENDPOINT).
  '@opentelemetry/api',
  '@opentelemetry/sdk-trace',
  '@opentelemetry/exporter-trace-otlp-http',
];
/** pge's own folders that only the CLI and the servers use. */
const LAZY_FOLDERS = ['/src/cli/', '/src/dashboard/', '/src/graph/'];

/** The hook: refuses to resolve any of `data.refused` or a file in `data.folders`, naming the module that asked. */
const HOOK = `
let refused = [];
let folders = [];
export function initialize(data) { refused = data.refused; folders = data.folders; }
export async function resolve(specifier, context, next) {
  const parts = specifier.split('/');
  const name = specifier.startsWith('@') ? parts.slice(0, 2).join('/') : parts[0];
  if (refused.includes(name)) throw new Error('LAZY VIOLATION: ' + name + ' imported by ' + context.parentURL);
  const resolved = await next(specifier, context);
  const folder = folders.find((f) => resolved.url.includes(f));
  if (folder) throw new Error('LAZY VIOLATION: ' + resolved.url + ' imported by ' + context.parentURL);
  return resolved;
}`;

/**
 * Imports `entry` in a fresh node (TypeScript through tsx), with `LAZY` refused by the hook unless
 * `hook` is false, and then looks for them among the CommonJS modules loaded; returns the output.
 */
function importInFreshNode(entry: string, hook = true): { status: number | null; out: string } {
  const script = `
import { register, createRequire } from 'node:module';
register('data:text/javascript,' + encodeURIComponent(${JSON.stringify(HOOK)}), import.meta.url, {
  data: { refused: ${JSON.stringify(hook ? LAZY : [])}, folders: ${JSON.stringify(hook ? LAZY_FOLDERS : [])} },
});
const lib = await import(${JSON.stringify(entry)});
const loaded = Object.keys(createRequire(import.meta.url).cache).filter((path) =>
  ${JSON.stringify(LAZY)}.some((name) => path.includes('/node_modules/' + name + '/')),
);
if (loaded.length > 0) throw new Error('LAZY VIOLATION: loaded through require: ' + loaded.join(', '));
console.log('exports: ' + Object.keys(lib).sort().join(' '));
`;
  const child = spawnSync(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
    cwd: ROOT,
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { status: child.status, out: `${child.stdout}${child.stderr}` };
}

const ENTRY = pathToFileURL(join(ROOT, 'src', 'index.ts')).href;

describe('importing the library', () => {
  it('loads neither openai nor yaml, NATS, the inspector, the CLI nor the dashboard', () => {
    const { status, out } = importInFreshNode(ENTRY);
    expect(out).not.toContain('LAZY VIOLATION');
    expect(status).toBe(0);
    expect(out).toMatch(/exports: .*\bOpenAIModel\b.*\bPlannerGeneratorEvaluator\b/);
  });

  it('would see an eager import of one of them, by either check', () => {
    const eager = pathToFileURL(join(import.meta.dirname, 'fixtures', 'eager-entry.ts')).href;
    const hooked = importInFreshNode(eager);
    expect(hooked.status).not.toBe(0);
    expect(hooked.out).toContain(`LAZY VIOLATION: yaml imported by ${eager}`);
    const required = importInFreshNode(eager, false);
    expect(required.status).not.toBe(0);
    expect(required.out).toMatch(/LAZY VIOLATION: loaded through require: \S*\/node_modules\/yaml\//);
  });
});
