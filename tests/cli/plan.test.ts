import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readLogFile } from '../../src/persistence/index.js';
import { inputOf } from '../../src/roles/prompts.js';
import { PlanDocument, type RunEvent, type RunEventOf } from '../../src/schemas/index.js';
import type { FakeStep } from '../support/fake-openai-server.js';
import { schemaOf } from '../support/scripted-deployment.js';
import {
  CONTRACT,
  evaluation,
  fakeServerAndScratch,
  logsIn,
  REVIEW,
  runCli,
  scripted,
  WORK,
} from './run-cli.js';

/**
 * `pge plan` and `pge run --plan` as a user meets them: real processes against the scripted
 * OpenAI-compatible server, which counts every request. The planner alone writes a plan document;
 * a run of it asks no planner; a bad file is refused with its name and the field at fault (exit 2).
 */

const context = fakeServerAndScratch('pge-plan-cli-');
const pge = (args: string[], env: Record<string, string> = {}) =>
  runCli(args, { cwd: context.tmp, env: { OPENAI_BASE_URL: context.server.url, ...env } });
/** The schema of every chat request the server got since the `from`th. */
const asked = (from = 0) =>
  context.server
    .completions()
    .slice(from)
    .map((r) => schemaOf(r.body) ?? '?');
const write = (name: string, text: string) => {
  const path = join(context.tmp, name);
  writeFileSync(path, text);
  return path;
};

describe('pge plan', () => {
  it('asks the planner alone, writes a plan document and prints it; pge run --plan then asks no planner', async () => {
    context.server.script(scripted());
    const planned = await pge(['plan', 'Write a haiku about rain', '--out', 'plan.json']);
    expect(planned.code, planned.stderr).toBe(0);
    expect(asked()).toEqual(['pge_plan']);
    const file = join(context.tmp, 'plan.json');
    const doc = PlanDocument.parse(JSON.parse(readFileSync(file, 'utf8')));
    expect(doc).toMatchObject({ version: 1, task: 'Write a haiku about rain', scope: 'A haiku about rain' });
    // The thresholds a run enforces: the plan's for imagery, the fallback (6) for the open one.
    expect(doc.criteria.map((c) => [c.name, c.threshold])).toEqual([
      ['accuracy', 6],
      ['imagery', 7],
    ]);
    expect(planned.stdout).toContain('Task: Write a haiku about rain');
    expect(planned.stdout).toMatch(/^ {2}1\. Write the haiku \[write\]$/m);
    expect(planned.stdout).toMatch(/^ {2}accuracy +high +6 +Follows 5-7-5$/m);
    expect(planned.stderr).toContain(
      'plan written to plan.json; review or edit it, then run it: pge run --plan plan.json',
    );
    expect(logsIn(context.tmp)).toEqual([]);

    const ran = await pge(['run', '--plan', 'plan.json', '--working-dir', context.tmp, '--json']);
    expect(ran.code, ran.stderr).toBe(0);
    expect(asked(1)).toEqual(['pge_contract', 'pge_contract_review', 'pge_work', 'pge_evaluation']);
    const result = JSON.parse(ran.stdout);
    expect(result.passed).toBe(true);
    const events = await readLogFile(result.outputPath);
    expect(taskOf(events)).toBe('Write a haiku about rain');
    const created = events.find((e) => e.type === 'plan.created') as RunEventOf<'plan.created'>;
    expect(created.payload.given).toEqual({ file });
  });

  it('prints the document as JSON with --json, and writes no file without --out', async () => {
    context.server.script(scripted());
    const r = await pge(['plan', 'Write a haiku about rain', '--json', '--threshold', 'accuracy=9']);
    expect(r.code, r.stderr).toBe(0);
    const doc = PlanDocument.parse(JSON.parse(r.stdout));
    expect(doc.$schema).toBe('node_modules/pge/schemas/plan.schema.json');
    expect(doc.criteria.map((c) => c.threshold)).toEqual([9, 7]);
    expect(existsSync(join(context.tmp, 'plan.json'))).toBe(false);
  });

  it('refuses to replace a file unless --force, before asking the planner', async () => {
    context.server.script(scripted());
    const file = write('plan.json', 'my edits');
    const refused = await pge(['plan', 'Write a haiku', '--out', 'plan.json']);
    expect(refused.code).toBe(2);
    expect(refused.stderr.split('\n')[0]).toBe(
      `pge: --out: ${file} already exists; pge plan replaces a file only with --force (or give another --out)`,
    );
    expect(readFileSync(file, 'utf8')).toBe('my edits');
    expect(asked()).toEqual([]);
    const forced = await pge(['plan', 'Write a haiku', '--out', 'plan.json', '--force']);
    expect(forced.code, forced.stderr).toBe(0);
    expect(PlanDocument.parse(JSON.parse(readFileSync(file, 'utf8'))).task).toBe('Write a haiku');
  });

  it('has a help that names its flags, and only those that apply to planning', async () => {
    const r = await pge(['plan', '--help']);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(
      /^Usage: pge plan "<task>" \[--out <file\.json> \[--force\]\] \[--json\] \[flags\]$/m,
    );
    for (const flag of [
      '--out <file.json>',
      '--force',
      '--json',
      '--demo',
      '--rubric',
      '--max-steps',
      '--threshold',
    ])
      expect(r.stdout, flag).toContain(`  ${flag}`);
    for (const flag of ['--parallel', '--nats', '--log', '--max-cost', '--plan', '--validate'])
      expect(r.stdout, flag).not.toMatch(new RegExp(`^ +${flag} `, 'm'));
    expect(r.stdout).toContain('pge plan "Write a short guide to intermittent fasting" --out plan.json');
    const top = await pge(['--help']);
    expect(top.stdout).toMatch(/^ {2}pge plan "<task>" \[flags\] +ask the planner alone for a plan/m);
    const run = await pge(['run', '--help']);
    expect(run.stdout).toMatch(/^ {2}--plan <file> +Run this plan instead of asking the planner/m);
    const batch = await pge(['batch', 'tasks.txt', '--plan', 'plan.json']);
    expect(batch.code).toBe(2);
    expect(batch.stderr.split('\n')[0]).toBe("pge: unknown option '--plan'");
  });

  it("points the written $schema at the nearest installed pge's schema, relative to the file", async () => {
    context.server.script(scripted());
    const installed = join(context.tmp, 'node_modules', 'pge', 'schemas');
    mkdirSync(installed, { recursive: true });
    writeFileSync(join(installed, 'plan.schema.json'), '{}');
    mkdirSync(join(context.tmp, 'plans'));
    for (const [out, ref] of [
      ['plan.json', 'node_modules/pge/schemas/plan.schema.json'],
      ['plans/haiku.json', '../node_modules/pge/schemas/plan.schema.json'],
    ]) {
      const r = await pge(['plan', 'Write a haiku', '--out', out!]);
      expect(r.code, r.stderr).toBe(0);
      expect(JSON.parse(readFileSync(join(context.tmp, out!), 'utf8')).$schema).toBe(ref);
    }
    const missing = await pge(['plan', 'Write a haiku', '--out', 'drafts/plan.json']);
    expect(missing.code).toBe(2);
    expect(missing.stderr.split('\n')[0]).toBe(
      `pge: --out: the directory of ${join(context.tmp, 'drafts', 'plan.json')} does not exist`,
    );
    expect(asked()).toEqual(['pge_plan', 'pge_plan']);
  });

  it('needs a task', async () => {
    const r = await pge(['plan', '--out', 'plan.json']);
    expect(r.code).toBe(2);
    expect(r.stderr.split('\n')[0]).toBe("pge: missing required argument 'task'");
  });

  it('fails with 3 when the planner fails, and writes nothing', async () => {
    context.server.script(() => ({ status: 400, error: { message: 'no such model' } }));
    const r = await pge(['plan', 'Write a haiku', '--out', 'plan.json']);
    expect(r.code).toBe(3);
    expect(r.stderr).toContain('no such model');
    expect(existsSync(join(context.tmp, 'plan.json'))).toBe(false);
  });

  it('--demo plans with the demo model, with no key; pge demo --plan runs that plan', async () => {
    const planned = await pge(['plan', '--demo', 'Plan a picnic', '--out', 'plan.json'], {
      OPENAI_API_KEY: '',
    });
    expect(planned.code, planned.stderr).toBe(0);
    expect(planned.stderr.split('\n')[0]).toMatch(/demo model.*not an AI/);
    const doc = PlanDocument.parse(JSON.parse(readFileSync(join(context.tmp, 'plan.json'), 'utf8')));
    expect(doc.steps.map((s) => s.id)).toEqual(['outline', 'sources', 'draft', 'review']);
    const ran = await pge(['demo', '--plan', 'plan.json', '--working-dir', context.tmp, '--json']);
    expect(ran.code, ran.stderr).toBe(0);
    const result = JSON.parse(ran.stdout);
    expect(result.passed).toBe(true);
    expect(taskOf(await readLogFile(result.outputPath))).toBe('Plan a picnic');
    expect(context.server.requests).toHaveLength(0);
  });
});

describe('pge run --plan', () => {
  const step = (id: string, extra = {}) => ({
    id,
    title: `Step ${id}`,
    description: 'd',
    expectedOutput: 'o',
    ...extra,
  });
  const GOOD = {
    version: 1,
    steps: [step('a'), step('b', { dependsOn: ['a'] })],
    criteria: [{ name: 'accuracy' }, { name: 'imagery' }],
  };
  /** Each check of a plan file, a file that fails it, and the field and fault named. */
  const BAD: [string, string, string][] = [
    ['not JSON', '{"version": 1,', 'not JSON: '],
    [
      'no version',
      JSON.stringify({ ...GOOD, version: undefined }),
      'version: a plan document says its version: "version": 1',
    ],
    [
      'another version',
      JSON.stringify({ ...GOOD, version: 2 }),
      'version: this pge reads plan documents of version 1, not 2',
    ],
    [
      'a misspelt field',
      JSON.stringify({ ...GOOD, steps: [step('a', { depends_on: [] })] }),
      'steps[0]: unknown field "depends_on"',
    ],
    ['no steps', JSON.stringify({ ...GOOD, steps: [] }), 'steps: a plan needs at least one step'],
    [
      'a duplicate step id',
      JSON.stringify({ ...GOOD, steps: [step('a'), step('a')] }),
      'steps[1].id: duplicate step id "a"',
    ],
    [
      'an id with a space',
      JSON.stringify({ ...GOOD, steps: [step('a b')] }),
      'steps[0].id: ids may hold only letters, digits, "-" and "_"',
    ],
    [
      'a dependency on an unknown step',
      JSON.stringify({ ...GOOD, steps: [step('a'), step('b', { dependsOn: ['z'] })] }),
      'steps[1].dependsOn: step "b" depends on "z", which is not an earlier step',
    ],
    [
      'a dependency on a later step (a cycle)',
      JSON.stringify({ ...GOOD, steps: [step('a', { dependsOn: ['b'] }), step('b', { dependsOn: ['a'] })] }),
      'steps[0].dependsOn: step "a" depends on "b", which is not an earlier step',
    ],
    [
      'threshold 11',
      JSON.stringify({ ...GOOD, criteria: [{ name: 'accuracy', threshold: 11 }] }),
      'criteria[0].threshold: Too big: expected number to be <=10',
    ],
    [
      'a duplicate criterion',
      JSON.stringify({ ...GOOD, criteria: [{ name: 'accuracy' }, { name: 'Accuracy ' }] }),
      'criteria[1].name: duplicate criterion "accuracy"',
    ],
    [
      'no criteria',
      JSON.stringify({ ...GOOD, criteria: [] }),
      'criteria: a rubric needs at least one criterion',
    ],
    [
      'an empty title',
      JSON.stringify({ ...GOOD, steps: [step('a', { title: '' })] }),
      'steps[0].title: Too small: expected string to have >=1 characters',
    ],
  ];

  it.each(BAD)(
    'refuses a file with %s: exit 2, the file and the field in one line, no call',
    async (_, text, fault) => {
      const file = write('bad.json', text);
      const r = await pge(['run', 'Write it', '--plan', 'bad.json', '--working-dir', context.tmp]);
      expect(r.code).toBe(2);
      const [line, hint] = r.stderr.split('\n');
      expect(line!.startsWith(`pge: ${file}: ${fault}`), line).toBe(true);
      expect(hint).toBe("Run 'pge run --help' for usage.");
      expect(context.server.requests).toHaveLength(0);
      expect(logsIn(context.tmp)).toEqual([]);
    },
  );

  it('accepts the file the checks refuse once it is fixed', async () => {
    context.server.script(scripted());
    write('good.json', JSON.stringify(GOOD));
    const r = await pge(['run', 'Write it', '--plan', 'good.json', '--working-dir', context.tmp]);
    expect(r.code, r.stderr).toBe(0);
    expect(asked().filter((s) => s === 'pge_plan')).toEqual([]);
  });

  it('needs a task when the file has none, and names the file', async () => {
    const file = write('plan.json', JSON.stringify(GOOD));
    const r = await pge(['run', '--plan', 'plan.json']);
    expect(r.code).toBe(2);
    expect(r.stderr.split('\n')[0]).toBe(
      `pge: pge run needs a task: the plan ${file} has none ("task"), so give it: pge run "<task>" --plan <file>`,
    );
    const none = await pge(['run']);
    expect(none.code).toBe(2);
    expect(none.stderr.split('\n')[0]).toBe(
      'pge: pge run needs a task: pge run "<task>", or a plan with one: pge run --plan <file>',
    );
  });

  it("takes --rubric over the file's rubric, and a task given over the file's", async () => {
    context.server.script(scripted());
    write('plan.json', JSON.stringify({ ...GOOD, task: 'the file task', steps: [step('a')] }));
    const rubric = [
      { name: 'accuracy', weight: 'high', description: 'exact', threshold: 8 },
      { name: 'imagery', weight: 'standard', description: 'vivid', threshold: 7 },
    ];
    write('rubric.json', JSON.stringify(rubric));
    const r = await pge([
      'run',
      'the given task',
      '--plan',
      'plan.json',
      '--rubric',
      'rubric.json',
      '--json',
    ]);
    expect(r.code, r.stderr).toBe(0);
    const result = JSON.parse(r.stdout);
    const events = await readLogFile(result.outputPath);
    expect(taskOf(events)).toBe('the given task');
    const created = events.find((e) => e.type === 'plan.created') as RunEventOf<'plan.created'>;
    expect(created.payload.criteria).toEqual(rubric);
  });

  it("runs the latest plan of a log: a replan's, with no planner call", async () => {
    // The first plan's step fails; the replan's passes.
    const replanned = { ...scriptedPlan('rewrite'), scope: 'the replan' };
    context.server.script((body): FakeStep => {
      const schema = schemaOf(body);
      const input = inputOf(body.messages) as { replan?: unknown; step?: { id: string } };
      if (schema === 'pge_plan') return { content: input.replan ? replanned : scriptedPlan('write') };
      if (schema === 'pge_evaluation') return { content: evaluation(input.step?.id === 'write' ? 3 : 9) };
      const answers: Record<string, object> = {
        pge_contract: CONTRACT,
        pge_contract_review: REVIEW,
        pge_work: WORK,
      };
      return { content: answers[schema ?? ''] ?? null };
    });
    const first = await pge([
      'run',
      'Write a haiku',
      '--on-exhausted',
      'replan',
      '--max-retries',
      '0',
      '--working-dir',
      context.tmp,
      '--json',
    ]);
    expect(first.code, first.stderr).toBe(0);
    expect(asked().filter((s) => s === 'pge_plan')).toHaveLength(2);
    const log = JSON.parse(first.stdout).outputPath as string;
    expect(readFileSync(log, 'utf8')).toMatch(/Plan document/);

    const since = context.server.completions().length;
    const again = await pge(['run', '--plan', log, '--working-dir', context.tmp, '--json']);
    expect(again.code, again.stderr).toBe(0);
    expect(asked(since)).toEqual(['pge_contract', 'pge_contract_review', 'pge_work', 'pge_evaluation']);
    const result = JSON.parse(again.stdout);
    expect(result.passed).toBe(true);
    expect(taskOf(await readLogFile(result.outputPath))).toBe('Write a haiku');
    expect(result.plan.scope).toBe('the replan');
    expect(result.plan.steps.map((s: { id: string }) => s.id)).toEqual(['rewrite']);
  });
});

/** The task a run's log says it ran. */
const taskOf = (events: readonly RunEvent[]) => (events[0] as RunEventOf<'run.started'>).payload.task;

/** A one-step plan of the haiku rubric, its step named `id`. */
function scriptedPlan(id: string) {
  return {
    scope: `plan of ${id}`,
    steps: [{ id, title: `Step ${id}`, description: 'write it', expectedOutput: 'a haiku', dependsOn: [] }],
    criteria: [
      { name: 'accuracy', weight: 'high', description: 'Follows 5-7-5', threshold: null },
      { name: 'imagery', weight: 'standard', description: 'Vivid', threshold: 7 },
    ],
  };
}
