import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeEach, describe, expect, it } from 'vitest';
import type { FakeStep } from '../support/fake-openai-server.js';
import { fakeServerAndScratch, runCli, scripted } from './run-cli.js';

/**
 * `--max-cost` with a local model, as a new user tries it: pge prices only the models it knows,
 * so a budget in dollars needs a price for every model that would spend it. The real CLI runs
 * against the fake OpenAI server, which reports 1000 prompt and 500 completion tokens per call.
 */

const LOCAL = 'llama3.1';
const TOKENS = { prompt_tokens: 1000, completion_tokens: 500 };

const scratch = fakeServerAndScratch('pge-cost-');
beforeEach(() => {
  // biome-ignore lint/suspicious/noExplicitAny: the request body as the client sent it.
  scratch.server.script((body: any): FakeStep => ({ ...scripted(9)(body), usage: TOKENS }) as FakeStep);
});

const run = (...flags: string[]) =>
  runCli(
    [
      'run',
      'Write a haiku',
      '--base-url',
      scratch.server.url,
      '--model',
      LOCAL,
      '--working-dir',
      scratch.tmp,
      ...flags,
    ],
    {
      cwd: scratch.tmp,
    },
  );

describe('--max-cost and prices', () => {
  it('refuses --max-cost for a model without a price, before any call, and says how to give one', async () => {
    const r = await run('--max-cost', '1');
    expect(r.code).toBe(2);
    expect(r.stderr).toContain(`maxCostUsd cannot be kept: no price is known for model ${LOCAL}`);
    expect(r.stderr).toContain(`--price ${LOCAL}=<input>,<output>`);
    expect(scratch.server.completions()).toHaveLength(0);
  });

  it('reports usage as unpriced when a call had no price', async () => {
    const r = await run('--json');
    expect(r.code).toBe(0);
    const { usage } = JSON.parse(r.stdout);
    expect(usage).toMatchObject({ calls: 5, promptTokens: 5000, costUsd: 0, priced: false });
  });

  it('prices a model from --price and keeps --max-cost with it', async () => {
    const r = await run('--price', `${LOCAL}=2,4`, '--max-cost', '1', '--json');
    expect(r.code).toBe(0);
    const { usage } = JSON.parse(r.stdout);
    // 5 calls × (1000 × $2 + 500 × $4) per million tokens.
    expect(usage.priced).toBe(true);
    expect(usage.costUsd).toBeCloseTo(0.02, 10);
  });

  it('takes prices from the config file too, and a --price adds to them', async () => {
    writeFileSync(
      join(scratch.tmp, 'pge.config.json'),
      JSON.stringify({ prices: { [LOCAL]: { inputPerMTok: 2, outputPerMTok: 4 } } }),
    );
    const r = await run('--max-cost', '0.01');
    // Priced at $0.004 a call, the run stops before a request that could exceed the budget.
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/budget/);
    const config = await runCli(['config', '--price', 'other=1,1'], { cwd: scratch.tmp });
    expect(config.stdout).toContain(
      `prices: {"${LOCAL}":{"inputPerMTok":2,"outputPerMTok":4},"other":{"inputPerMTok":1,"outputPerMTok":1}} (flag + config file)`,
    );
  });

  it('says what a price looks like when one is malformed', async () => {
    const r = await run('--price', `${LOCAL}=2`);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain('--price expects <model>=<input>,<output> in USD per million tokens');
  });
});
