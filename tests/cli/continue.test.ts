import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readLogFile } from '../../src/persistence/index.js';
import { inputOf } from '../../src/roles/prompts.js';
import type { RunEventOf } from '../../src/schemas/index.js';
import { stepsAskedSince, THREE_PART_PLAN } from '../support/continue-fixtures.js';
import type { FakeStep } from '../support/fake-openai-server.js';
import { answers, asksForTools, schemaOf, toolAnswers } from '../support/scripted-deployment.js';
import { fakeServerAndScratch, runCli } from './run-cli.js';

/**
 * `pge continue` as a user meets it: real processes against the scripted OpenAI-compatible server,
 * which counts every request. After a run whose second step failed, continue runs exactly that
 * step and the one that depends on it, keeps the first step's artifact and its workspace file.
 */

const context = fakeServerAndScratch('pge-continue-cli-');
const pge = (args: string[]) =>
  runCli(args, { cwd: context.tmp, env: { OPENAI_BASE_URL: context.server.url } });

/** Steps whose evaluations score 5 (below the thresholds); each step's first work writes a file. */
function script(failing: ReadonlySet<number>) {
  // biome-ignore lint/suspicious/noExplicitAny: the request body as the SDK sent it.
  return (body: any): FakeStep => {
    const schema = schemaOf(body) ?? '';
    const { stepNumber } = inputOf(body.messages) as { stepNumber: number };
    if (schema === 'pge_work' && toolAnswers(body).length === 0 && body.tools)
      return asksForTools([
        { name: 'write_file', arguments: { path: `step-${stepNumber}.md`, content: 'x' } },
      ]);
    if (schema === 'pge_work')
      return { content: { output: `work of step ${stepNumber}`, notes: '', selfAssessment: [] } };
    return { content: answers(failing.has(stepNumber) ? 5 : 9, 3)[schema] ?? {} };
  };
}

describe('pge continue', () => {
  it('runs the failed step and its dependents again, keeping the rest and their files', async () => {
    writeFileSync(join(context.tmp, 'plan.json'), JSON.stringify(THREE_PART_PLAN));
    context.server.script(script(new Set([2])));
    const common = ['--working-dir', context.tmp, '--max-retries', '0', '--parallel', '1', '--json'];
    const first = await pge(['run', '--plan', 'plan.json', ...common]);
    expect(first.code, first.stderr).toBe(1);
    const earlier = JSON.parse(first.stdout);
    expect(earlier.totalStepsCompleted).toBe(2);

    // The same log cut before its closing event, as a run whose process died leaves it: resumed, not continued.
    const text = readFileSync(earlier.outputPath, 'utf8');
    const closing = text.search(/<!-- pge:event seq=\d+ type=run\.(completed|failed) -->/);
    expect(closing).toBeGreaterThan(0);
    // Cut in the middle of its closing event, the write a crash tore: read up to its last whole event.
    const asked = context.server.completions().length;
    for (const [name, end] of [
      ['crashed.md', closing],
      ['torn.md', closing + 80],
    ] as const) {
      const crashed = join(context.tmp, name);
      writeFileSync(crashed, text.slice(0, end));
      const refused = await pge(['continue', crashed, ...common]);
      expect(refused.code).toBe(2);
      expect(refused.stderr.split('\n')[0]).toMatch(
        new RegExp(
          `^pge: cannot continue ${crashed}: run ${earlier.runId} did not end \\(its last event is [a-z.]+, seq \\d+\\); resume it with pge resume ${crashed}$`,
        ),
      );
    }
    expect(context.server.completions()).toHaveLength(asked);

    context.server.script(script(new Set()));
    const since = context.server.completions().length;
    const next = await pge(['continue', earlier.outputPath, ...common]);
    expect(next.code, next.stderr).toBe(0);
    expect(next.stderr).toContain(
      `pge: run 2 of job ${earlier.runId}, continuing run ${earlier.runId}: kept s1; runs s2, s3`,
    );
    expect(stepsAskedSince(context.server, since)).toEqual([2, 3]);
    const result = JSON.parse(next.stdout);
    expect(result.passed).toBe(true);
    expect(
      result.stepLogs.map((s: { stepId: string; keptFrom: string | null }) => [s.stepId, s.keptFrom]),
    ).toEqual([
      ['s1', earlier.runId],
      ['s2', null],
      ['s3', null],
    ]);
    // The kept step's file is in the new run's workspace, copied from the earlier run's.
    expect(existsSync(join(context.tmp, 'workspaces', result.runId, 'step-1.md'))).toBe(true);
    const events = await readLogFile(result.outputPath);
    const started = events[0] as RunEventOf<'run.started'>;
    expect(started.payload.job).toEqual({ id: earlier.runId, run: 2 });
    expect(readFileSync(result.outputPath, 'utf8')).toContain(`### [STEP 1 KEPT]`);

    // Every step has passed now: nothing is left, and nothing is asked.
    const after = context.server.completions().length;
    const done = await pge(['continue', result.outputPath, ...common]);
    expect(done.code).toBe(2);
    expect(done.stderr.split('\n')[0]).toMatch(
      /^pge: job .* has nothing left to do: every step of its plan passed/,
    );
    expect(context.server.completions()).toHaveLength(after);
  });

  it('refuses a log that is not an ended run', async () => {
    const r = await pge(['continue', 'missing.md']);
    expect(r.code).toBe(2);
    expect(r.stderr.split('\n')[0]).toMatch(
      new RegExp(`^pge: cannot continue ${join(context.tmp, 'missing.md')}: ENOENT`),
    );
  });
});
