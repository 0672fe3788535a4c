import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { describe, expect, it } from 'vitest';

/**
 * The folders of src/ depend on each other one way: `cli` on `api`, `api` on `runtime`, `runtime`
 * on `actors`, and so on down to `schemas`. A cycle between two folders means neither can be read,
 * tested or moved without the other, so this test reads every relative import and export in src/
 * and fails on any cycle in the graph of folders. A file directly in src/ (`errors.ts`,
 * `index.ts`) is a unit of its own. Within a folder the files obey the same rule: a cycle between
 * files fails too, whether its imports are of values or only of types (`import type`), since a
 * reader follows both. The import lines are read as text: the graph needs only the module
 * specifiers, and TypeScript 7 has no compiler API to ask.
 */

const SRC = resolve(import.meta.dirname, '../../src');

/** Every `.ts` file under `dir`. */
function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });
}

/** A relative import of a file: its module specifier, and whether it brings in types only. */
interface RelativeImport {
  specifier: string;
  kind: 'type' | 'value';
}

/** The relative imports of a file: static imports and re-exports, bare and dynamic imports. */
function relativeImports(text: string): RelativeImport[] {
  const patterns = [
    /\b(?:import|export)\s[^'"`;]*?\bfrom\s*['"]([^'"]+)['"]/g,
    /\bimport\s*['"]([^'"]+)['"]/g,
    /\bimport\s*\(\s*['"]([^'"]+)['"]\s*\)/g,
  ];
  return patterns
    .flatMap((pattern) => [...text.matchAll(pattern)])
    .filter((m) => m[1]!.startsWith('.'))
    .map((m) => ({ specifier: m[1]!, kind: /^(?:import|export)\s+type\b/.test(m[0]) ? 'type' : 'value' }));
}

/** The relative module specifiers of a file. */
function relativeSpecifiers(text: string): string[] {
  return relativeImports(text).map((i) => i.specifier);
}

/** The unit a file belongs to: its first folder under src/, or the file itself at the top. */
function unitOf(file: string): string {
  const parts = relative(SRC, file).split(sep);
  return parts.length > 1 ? `${parts[0]}/` : parts[0]!;
}

/** A file's path under src/, as a unit of its own. */
function fileOf(file: string): string {
  return relative(SRC, file).split(sep).join('/');
}

/** The edges between the units of src/ that `unit` names, each with the file imports that make it. */
function importGraph(unit: (file: string) => string): Map<string, Map<string, string[]>> {
  const graph = new Map<string, Map<string, string[]>>();
  for (const file of sourceFiles(SRC)) {
    const from = unit(file);
    const edges = graph.get(from) ?? new Map<string, string[]>();
    graph.set(from, edges);
    for (const { specifier, kind } of relativeImports(readFileSync(file, 'utf8'))) {
      const target = resolve(dirname(file), specifier);
      if (relative(SRC, target).startsWith('..')) continue;
      const to = unit(target.replace(/\.js$/, '.ts'));
      if (to === from) continue;
      const files = edges.get(to) ?? [];
      files.push(`${relative(SRC, file)} → ${specifier} (${kind})`);
      edges.set(to, files);
    }
  }
  return graph;
}

/** Each cycle of `graph` as the edges between its members, one line each. */
function cycleReport(graph: ReadonlyMap<string, ReadonlyMap<string, string[]>>): string[] {
  return cycles(graph).map((component) =>
    component
      .flatMap((from) =>
        component.flatMap((to) => (graph.get(from)?.get(to) ?? []).map((edge) => `${from} → ${to}: ${edge}`)),
      )
      .join('\n'),
  );
}

/** The strongly connected components with more than one node (Tarjan): each is a cycle. */
function cycles(graph: ReadonlyMap<string, ReadonlyMap<string, unknown>>): string[][] {
  let counter = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const found: string[][] = [];
  const visit = (node: string): void => {
    index.set(node, counter);
    low.set(node, counter++);
    stack.push(node);
    for (const next of graph.get(node)?.keys() ?? []) {
      if (!index.has(next)) {
        visit(next);
        low.set(node, Math.min(low.get(node)!, low.get(next)!));
      } else if (stack.includes(next)) low.set(node, Math.min(low.get(node)!, index.get(next)!));
    }
    if (low.get(node) === index.get(node)) {
      const component: string[] = [];
      let member: string;
      do {
        member = stack.pop()!;
        component.push(member);
      } while (member !== node);
      if (component.length > 1) found.push(component.sort());
    }
  };
  for (const node of graph.keys()) if (!index.has(node)) visit(node);
  return found;
}

describe('the folders of src/', () => {
  it('import each other without a cycle', () => {
    const graph = importGraph(unitOf);
    expect(graph.get('api/')?.has('runtime/'), 'api imports runtime: the graph is read').toBe(true);
    expect(cycleReport(graph), 'import cycles between folders of src/').toEqual([]);
  });

  it('hold files that import each other without a cycle, of values or of types', () => {
    const graph = importGraph(fileOf);
    expect(
      graph.get('conductor/coordinator.ts')?.has('conductor/run-session.ts'),
      'the coordinator imports its session: the graph is read',
    ).toBe(true);
    expect(cycleReport(graph), 'import cycles between files of src/').toEqual([]);
  });

  it('are judged by a cycle finder that finds a cycle of two and of three, and none in a chain', () => {
    const graph = (edges: string[]) => {
      const g = new Map<string, Map<string, true>>();
      for (const edge of edges) {
        const [from, to] = edge.split('>') as [string, string];
        g.set(from, (g.get(from) ?? new Map()).set(to, true));
        if (!g.has(to)) g.set(to, new Map());
      }
      return g;
    };
    expect(cycles(graph(['cli>api', 'api>runtime', 'runtime>actors']))).toEqual([]);
    expect(cycles(graph(['cli>api', 'api>runtime', 'runtime>api']))).toEqual([['api', 'runtime']]);
    expect(cycles(graph(['a>b', 'b>c', 'c>a', 'c>d']))).toEqual([['a', 'b', 'c']]);
  });

  it('are read from every form of relative import', () => {
    const text = [
      "import { a } from '../api/a.js';",
      "import type {\n  B,\n  C,\n} from '../runtime/b.js';",
      "export { d } from './d.js';",
      "export type { E } from '../bus/e.js';",
      "import '../side/effect.js';",
      "const lazy = await import('../actors/lazy.js');",
      "import { z } from 'zod';",
    ].join('\n');
    expect(
      relativeImports(text)
        .filter((i) => i.kind === 'type')
        .map((i) => i.specifier)
        .sort(),
    ).toEqual(['../bus/e.js', '../runtime/b.js']);
    expect(relativeSpecifiers(text).sort()).toEqual(
      [
        '../actors/lazy.js',
        '../api/a.js',
        '../bus/e.js',
        '../runtime/b.js',
        '../side/effect.js',
        './d.js',
      ].sort(),
    );
  });
});
