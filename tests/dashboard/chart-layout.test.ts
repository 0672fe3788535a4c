import { beforeAll, describe, expect, it } from 'vitest';
import { layoutChart } from '../../src/dashboard/chart-layout.js';
import type { ChartBox, ChartLayout } from '../../src/dashboard/chart-types.js';
import { drawnEdges, edgeText, machineGraph } from '../../src/graph/machine-graph.js';
import { runMachine } from '../../src/machines/run-machine.js';
import { sessionMachine } from '../../src/machines/session-machine.js';
import { stepMachine } from '../../src/machines/step-machine.js';

/**
 * The charts' layout (elkjs) held to what a reader needs: every state drawn once, inside its
 * parent and inside the picture, no box on another, every arrow running from its source's border
 * to its target's, in straight horizontal and vertical stretches that go around the states rather
 * than across them. Each check is also run on a layout broken on purpose, to show it can fail.
 */

type Point = [number, number];

/** Half a unit either way: ELK's coordinates are rounded to tenths. */
const TOLERANCE = 0.5;

/** The polylines of an arrow's path data (`M x,y L x,y …`, one `M` per section). */
function polylines(d: string): Point[][] {
  const lines: Point[][] = [];
  for (const [, command, x, y] of d.matchAll(/([ML])(-?[\d.]+),(-?[\d.]+)/g)) {
    const point: Point = [Number(x), Number(y)];
    if (command === 'M') lines.push([point]);
    else lines.at(-1)!.push(point);
  }
  return lines;
}

const inside = (box: ChartBox, [x, y]: Point, margin: number) =>
  x > box.x - margin && x < box.x + box.w + margin && y > box.y - margin && y < box.y + box.h + margin;

/** On the border of `box`, give or take the tolerance. */
const onBorder = (box: ChartBox, point: Point) =>
  inside(box, point, TOLERANCE) && !inside(box, point, -TOLERANCE);

/** Whether two boxes share any area. */
const overlap = (a: ChartBox, b: ChartBox) =>
  a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;

/** Whether the horizontal or vertical segment from `p` to `q` enters the inside of `box`. */
function crosses(box: ChartBox, [x1, y1]: Point, [x2, y2]: Point): boolean {
  const inner = {
    left: box.x + TOLERANCE,
    right: box.x + box.w - TOLERANCE,
    top: box.y + TOLERANCE,
    bottom: box.y + box.h - TOLERANCE,
  };
  const [left, right] = [Math.min(x1, x2), Math.max(x1, x2)];
  const [top, bottom] = [Math.min(y1, y2), Math.max(y1, y2)];
  return left < inner.right && right > inner.left && top < inner.bottom && bottom > inner.top;
}

/** Everything wrong with `layout`, in words; empty when it is sound. */
function problems(layout: ChartLayout): string[] {
  const found: string[] = [];
  const byId = new Map(layout.boxes.map((b) => [b.id, b]));
  for (const box of layout.boxes) {
    if (box.x < 0 || box.y < 0 || box.x + box.w > layout.width || box.y + box.h > layout.height)
      found.push(`${box.id} is outside the picture`);
    const parent = byId.get(box.path.at(-2) ?? '');
    // Below the parent's name and notes (`open`: invoke: run), drawn down to y + 28.
    const top = parent ? parent.y + (parent.notes.length > 0 ? 30 : 16) : 0;
    if (
      parent &&
      !(
        box.x > parent.x &&
        box.x + box.w < parent.x + parent.w &&
        box.y > top &&
        box.y + box.h < parent.y + parent.h
      )
    )
      found.push(`${box.id} is not inside ${parent.id}, below its name`);
    for (const other of layout.boxes)
      if (
        other.id < box.id &&
        !box.path.includes(other.id) &&
        !other.path.includes(box.id) &&
        overlap(box, other)
      )
        found.push(`${box.id} overlaps ${other.id}`);
  }
  for (const edge of layout.edges) {
    const name = `${edge.source} → ${edge.target}`;
    const from = byId.get(edge.source)!;
    const to = byId.get(edge.target)!;
    const lines = polylines(edge.d);
    const points = lines.flat();
    if (points.length < 2) {
      found.push(`${name} has no route`);
      continue;
    }
    if (!onBorder(from, points[0]!)) found.push(`${name} does not start on the border of ${edge.source}`);
    if (!onBorder(to, points.at(-1)!)) found.push(`${name} does not end on the border of ${edge.target}`);
    // States the arrow may pass through: its ends, and the compound states it leaves or enters.
    const passable = new Set([...from.path, ...to.path]);
    for (const line of lines)
      for (let i = 1; i < line.length; i++) {
        const [p, q] = [line[i - 1]!, line[i]!];
        if (p[0] !== q[0] && p[1] !== q[1]) found.push(`${name} has a slanted stretch`);
        for (const box of layout.boxes)
          if (!passable.has(box.id) && crosses(box, p, q)) found.push(`${name} crosses ${box.id}`);
      }
  }
  return found;
}

const MACHINES = { session: sessionMachine, run: runMachine, step: stepMachine };
const layouts = new Map<string, ChartLayout>();
beforeAll(async () => {
  for (const [name, machine] of Object.entries(MACHINES)) layouts.set(name, await layoutChart(machine));
});

describe('chart layout', () => {
  for (const [name, machine] of Object.entries(MACHINES)) {
    it(`lays out the ${name} chart: every state once, no box on another, arrows around the states`, () => {
      const layout = layouts.get(name)!;
      const graph = machineGraph(machine);
      expect(layout.boxes.map((b) => b.id).sort()).toEqual(
        graph.nodes
          .slice(1)
          .map((n) => n.id)
          .sort(),
      );
      expect(problems(layout)).toEqual([]);
      // Every transition between two states is on an arrow, with its event and guard.
      const drawn = new Set(layout.edges.flatMap((e) => e.labels.map((l) => `${e.source} ${e.target} ${l}`)));
      // Not drawn: a state's transitions to itself, and those into or out of its own parent.
      const moving = { ...graph, edges: graph.edges.filter((e) => e.source !== e.target) };
      const path = (id: string) => layout.boxes.find((b) => b.id === id)!.path;
      const between = drawnEdges(moving).filter(
        (e) => !path(e.source).includes(e.target) && !path(e.target).includes(e.source),
      );
      expect(between.length).toBeGreaterThan(5);
      for (const edge of between) expect(drawn).toContain(`${edge.source} ${edge.target} ${edgeText(edge)}`);
    });
  }

  it('leaves out the root’s targetless transitions, which only update the context', () => {
    // The step's `company` and `budget.others` change no state: no arrow says they restart it.
    const step = layouts.get('step')!;
    expect(step.edges.flatMap((e) => e.labels)).not.toContain('company [alone]');
    expect(step.edges.filter((e) => e.target === 'step.negotiating')).toEqual([]);
  });

  it('finds each fault in a layout broken on purpose', () => {
    const step = layouts.get('step')!;
    const moved = (id: string, change: Partial<ChartBox>): ChartLayout => ({
      ...step,
      boxes: step.boxes.map((b) => (b.id === id ? { ...b, ...change } : b)),
    });
    const judging = step.boxes.find((b) => b.id === 'step.judging')!;
    const evaluating = step.boxes.find((b) => b.id === 'step.evaluating')!;
    expect(problems(moved('step.judging', { x: evaluating.x, y: evaluating.y }))).toContain(
      'step.judging overlaps step.evaluating',
    );
    expect(problems(moved('step.passed', { x: step.width }))).toContain('step.passed is outside the picture');
    expect(problems(moved('step.executing.refining', { y: 0 }))).toContain(
      'step.executing.refining is not inside step.executing, below its name',
    );
    // The arrow into judging no longer reaches it once judging is moved away from where ELK put it.
    expect(problems(moved('step.judging', { x: judging.x + 40 }))).toContainEqual(
      expect.stringMatching(/→ step\.judging does not end on the border of step\.judging$/),
    );
    // An arrow drawn as a straight line from centre to centre, as the hand-written layout did.
    const [from, to] = ['step.validating', 'step.passed'].map((id) => step.boxes.find((b) => b.id === id)!);
    const straight = `M${from!.x + from!.w / 2},${from!.y + from!.h} L${to!.x + to!.w / 2},${to!.y}`;
    const across: ChartLayout = {
      ...step,
      edges: [...step.edges, { source: from!.id, target: to!.id, labels: ['test'], d: straight }],
    };
    expect(problems(across).filter((p) => p.startsWith('step.validating → step.passed'))).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/crosses step\./),
        'step.validating → step.passed has a slanted stretch',
      ]),
    );
  });
});
