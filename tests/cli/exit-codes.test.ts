import { describe, expect, it } from 'vitest';
import type { FakeStep } from '../support/fake-openai-server.js';
import { fakeServerAndScratch, runCli, scripted } from './run-cli.js';

/**
 * What the help promises against what the CLI does: the exit code of an answer that stays invalid,
 * and the defaults the CLI does not share with the library.
 */

const scratch = fakeServerAndScratch('pge-exit-');

/** The scripted haiku run, with one phase's answer replaced by one that never validates. */
function invalid(schema: string, answer: object) {
  // biome-ignore lint/suspicious/noExplicitAny: the request body as the client sent it.
  return (body: any): FakeStep =>
    body?.response_format?.json_schema?.name === schema ? { content: answer } : scripted(9)(body);
}

const run = (...flags: string[]) =>
  runCli(['run', 'Write a haiku', '--base-url', scratch.server.url, '--working-dir', scratch.tmp, ...flags], {
    cwd: scratch.tmp,
  });

const exitCodeLine = (help: string, code: number) =>
  help.slice(help.indexOf(`\n  ${code}  `), help.indexOf(`\n  ${code + 1}  `));

describe('an answer that stays invalid after repairs', () => {
  it('fails the attempt when it is an evaluation: the run ends with a failed step, exit 1, as the help says', async () => {
    // Scores one criterion of two: the rubric is not covered, so the evaluation is invalid.
    scratch.server.script(
      invalid('pge_evaluation', {
        scores: [{ criterion: 'accuracy', score: 9, evidence: 'x' }],
        findings: [],
        actionableFeedback: [],
        summary: 's',
      }),
    );
    const r = await run('--max-retries', '0', '--json');
    expect(r.code).toBe(1);
    const result = JSON.parse(r.stdout);
    expect(result.stepLogs[0].attempts[0]).toMatchObject({ verdict: 'fail', reason: 'invalid_evaluation' });
    const help = (await runCli(['run', '--help'], { cwd: scratch.tmp })).stdout;
    expect(exitCodeLine(help, 1)).toMatch(
      /evaluation answer that stays invalid after repairs fails its attempt/,
    );
    expect(exitCodeLine(help, 3)).not.toMatch(/evaluation/);
  });

  it('stops the run when it is the plan: exit 3, as the help says', async () => {
    scratch.server.script(invalid('pge_plan', { scope: 'no steps', steps: [], criteria: [] }));
    const r = await run();
    expect(r.code).toBe(3);
    expect(r.stderr).toMatch(/plan answer invalid/);
    const help = (await runCli(['run', '--help'], { cwd: scratch.tmp })).stdout;
    expect(exitCodeLine(help, 3)).toMatch(/a plan or contract answer stayed invalid after repairs/);
  });
});

describe("defaults of the CLI that are not the library's", () => {
  it('says so in pge config, as text and as JSON, and in the help', async () => {
    const text = await runCli(['config'], { cwd: scratch.tmp });
    expect(text.stdout).toContain("outputType: final (CLI default; the library's default is dict)");
    expect(text.stdout).toContain('maxSteps: 10 (default)');
    const json = JSON.parse((await runCli(['config', '--json'], { cwd: scratch.tmp })).stdout);
    expect(json.options.outputType).toEqual({
      value: 'final',
      source: 'CLI default',
      libraryDefault: 'dict',
    });
    const help = (await runCli(['run', '--help'], { cwd: scratch.tmp })).stdout;
    expect(help).toMatch(/--output-type [\s\S]*\(default final; the library's: dict\) \[outputType\]/);
  });
});
