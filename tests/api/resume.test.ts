import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import type { PgeOptions } from '../../src/api/options.js';
import { PlannerGeneratorEvaluator } from '../../src/api/planner-generator-evaluator.js';
import { ResumeError } from '../../src/errors.js';
import { readLogFile, renderEvent, renderLog } from '../../src/persistence/index.js';
import type { ModelRequest } from '../../src/roles/model.js';
import {
  type ContractReviewInput,
  type EvaluationInput,
  isRoleRequest,
  type PlanInput,
  type RunEvent,
  type RunEventOf,
  type WorkInput,
} from '../../src/schemas/index.js';
import { type Script, type ScriptedAnswer, ScriptedModel } from '../../src/testing.js';
import { approve, evaluate, planOf, proposal, times, work } from '../support/scripts.js';

/**
 * `resume(logPath)`: a run's log cut at every seq, as a crash may leave it, is resumed and must end
 * with the same decisions as the run that was never cut, asking a model only for the answers the
 * cut log does not hold. Every model answer is computed from the request alone, so a call asked
 * again gets the answer it got the first time.
 */

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'pge-resume-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** A re-ask after an invalid answer carries the answer and the problem: more than system + user. */
const isRepair = (request: ModelRequest) => request.messages.length > 2;
/** An answer of `phase` for every request, computed from the request. */
const always = (answer: ScriptedAnswer): ScriptedAnswer[] => times(100, answer);

interface Scenario {
  name: string;
  script: () => Script;
  options: PgeOptions;
  /** The error the run ends with, if it fails. */
  error?: string;
  /** Events the uninterrupted run must have, so that the cuts go through them. */
  shows: RunEvent['type'][];
}

const SCENARIOS: Scenario[] = [
  {
    // A plan cut to maxSteps, an amended and an imposed contract, a repaired work answer, an
    // evaluation that never validates, refine and pivot retries.
    name: 'retries, repairs, amendments and a cut plan',
    options: { maxSteps: 2, maxRetriesPerStep: 2, maxContractRounds: 2, maxRepairs: 1 },
    shows: [
      'plan.truncated',
      'step.contract.agreed',
      'step.contract.imposed',
      'step.evaluation.invalid',
      'step.retry.scheduled',
    ],
    script: () => ({
      // Clarity's threshold is the harness's fallback (6).
      plan: always({
        json: planOf(3, [
          { name: 'accuracy', threshold: 7 },
          { name: 'clarity', threshold: null },
        ]),
      }),
      contract: always(proposal),
      contract_review: always((_request, input) => {
        const { step, round } = input as ContractReviewInput;
        const amend = step.id === 's2' || round === 1;
        return amend
          ? { json: { status: 'amendments_required', amendments: [`cite ${round}`], rationale: 'vague' } }
          : approve;
      }),
      work: always((request, input) => {
        const { step, attempt } = input as WorkInput;
        return step.id === 's1' && attempt === 1 && !isRepair(request) ? { raw: 'not json' } : work();
      }),
      evaluation: always((_request, input) => {
        const { step, attempt } = input as EvaluationInput;
        if (step.id === 's2' && attempt === 2) return { raw: '{"scores": []}' };
        const scores: Record<string, number[]> = { s1: [4, 9], s2: [5, 0, 9] };
        return evaluate(scores[step.id]![attempt - 1]!);
      }),
    }),
  },
  {
    name: 'a replan after an exhausted step',
    options: { onStepExhausted: 'replan', maxReplans: 1, maxRetriesPerStep: 0 },
    shows: ['step.failed', 'step.passed'],
    script: () => ({
      plan: always((_request, input) => {
        if ((input as PlanInput).replan === null) return { json: planOf(2) };
        const plan = planOf(1);
        return { json: { ...plan, steps: [{ ...plan.steps[0]!, id: 'r1' }] } };
      }),
      contract: always(proposal),
      contract_review: always(approve),
      work: always(work()),
      // The first plan's first step never passes; the replanned one does.
      evaluation: always((_request, input) => evaluate((input as EvaluationInput).step.id === 's1' ? 3 : 9)),
    }),
  },
  {
    name: 'a token budget that stops the run',
    options: { maxTokens: 1000 },
    shows: ['run.failed'],
    script: () => ({
      plan: always({ json: planOf(3) }),
      contract: always(proposal),
      contract_review: always(approve),
      work: always(work()),
      evaluation: always(evaluate(9)),
    }),
  },
  {
    // The contract of step 2 never validates: role.failed after its repairs, and the run fails.
    name: 'a role failure that fails the run',
    options: { maxRepairs: 1 },
    error: 'InvalidOutputError',
    shows: ['role.failed', 'run.failed'],
    script: () => ({
      plan: always({ json: planOf(2) }),
      contract: always((_request, input) =>
        (input as WorkInput).step.id === 's2' ? { raw: '{"title": 1}' } : proposal,
      ),
      contract_review: always(approve),
      work: always(work()),
      evaluation: always(evaluate(9)),
    }),
  },
];

/** A harness on a fresh model of `scenario`'s script; each run or resume gets its own process state. */
function harness(scenario: Scenario, extra: PgeOptions = {}) {
  const model = new ScriptedModel(scenario.script(), { costUsd: 0.01 });
  const pge = new PlannerGeneratorEvaluator({
    plannerAgent: model,
    generatorAgent: model,
    evaluatorAgent: model,
    ...scenario.options,
    ...extra,
  });
  return { model, pge };
}

/** Runs `work` on the harness, closes it, and says how it ended. */
async function settle(pge: PlannerGeneratorEvaluator, work: () => Promise<unknown>) {
  try {
    await work();
    return null;
  } catch (error) {
    return error as Error;
  } finally {
    await pge.close();
  }
}

/** The run of `scenario` that no crash cut: its events and its model calls. */
async function uninterrupted(scenario: Scenario) {
  const path = join(dir, 'uninterrupted.md');
  const { model, pge } = harness(scenario, { sharedStatePath: path });
  const error = await settle(pge, () => pge.run('Write a guide'));
  return { events: await readLogFile(path), calls: model.requests.length, error };
}

/** `events` cut after `k` events, written as a log that a crash left, and resumed. */
async function resumeCut(scenario: Scenario, events: readonly RunEvent[], k: number, name = `cut-${k}`) {
  const path = join(dir, `${name}.md`);
  const text = renderLog(events.slice(0, k));
  writeFileSync(path, text);
  const { model, pge } = harness(scenario);
  const error = await settle(pge, () => pge.resume(path));
  const after = readFileSync(path, 'utf8');
  return { path, text, after, events: await readLogFile(path), calls: model.requests.length, error, pge };
}

/**
 * What a cut after `k` events of `events` holds, read independently of the replay: how many
 * requests were answered before it (the charts ask one at a time, in order), and the request in
 * flight at it with the calls it had made.
 */
function cutAt(events: readonly RunEvent[], k: number) {
  // A request's answer is the first event after it that is none of its calls, a plan cut or a resume.
  const notAnswers = new Set<RunEvent['type']>(['model.call.completed', 'plan.truncated', 'run.resumed']);
  const answerAt = (i: number) => events.findIndex((e, j) => j > i && !notAnswers.has(e.type));
  let answered = 0;
  let inFlight: { id: string; lostCalls: number } | null = null;
  events.slice(0, k).forEach((event, i) => {
    if (!isRoleRequest(event)) return;
    const at = answerAt(i);
    if (at !== -1 && at < k) answered++;
    else inFlight = { id: event.id, lostCalls: callsOf(events.slice(0, k), [event.id]) };
  });
  return { answered, inFlight: inFlight as { id: string; lostCalls: number } | null };
}

/** The model calls recorded for the requests `ids`. */
const callsOf = (events: readonly RunEvent[], ids: readonly string[]) =>
  events.filter((e) => e.type === 'model.call.completed' && ids.includes(e.payload.requestId)).length;

/** The model calls recorded in `events`. */
const callsIn = (events: readonly RunEvent[]) =>
  events.filter((e) => e.type === 'model.call.completed').length;

/** The model calls the first `n` requests of an uninterrupted run cost. */
const callsOfFirst = (events: readonly RunEvent[], n: number) =>
  callsOf(
    events,
    events
      .filter(isRoleRequest)
      .slice(0, n)
      .map((e) => e.id),
  );

/**
 * The run's decisions: every event but the model calls (the crash loses some and the repeat makes
 * them again) and the resume itself, without the envelope, request ids (seq-based, so shifted by a
 * resume), times and totals (checked on their own).
 */
function decisions(events: readonly RunEvent[]) {
  // A plan cut recorded just before a crash whose plan.created was lost: the repeated call cuts it again.
  const lostCut = (i: number) =>
    events[i]!.type === 'plan.truncated' &&
    events.find((e, j) => j > i && e.type !== 'model.call.completed')?.type === 'run.resumed';
  return events
    .filter((e, i) => e.type !== 'model.call.completed' && e.type !== 'run.resumed' && !lostCut(i))
    .map(({ type, payload }) => {
      const {
        requestId: _id,
        durationMs: _d,
        summary: _s,
        usage: _u,
        byPhase: _b,
        ...rest
      } = payload as Record<string, unknown>;
      return { type, payload: rest };
    });
}

const closing = (events: readonly RunEvent[]) =>
  events.at(-1) as RunEventOf<'run.completed'> | RunEventOf<'run.failed'>;

describe('resume, with a log cut at every seq', () => {
  for (const scenario of SCENARIOS) {
    it(`${scenario.name}: ends as the run that was never cut, asking only what the log lacks`, async () => {
      const full = await uninterrupted(scenario);
      expect(full.error?.name ?? null).toBe(scenario.error ?? null);
      expect(['run.completed', 'run.failed']).toContain(full.events.at(-1)!.type);
      const types = new Set(full.events.map((e) => e.type));
      for (const type of scenario.shows) expect(types, type).toContain(type);
      const inFlightCuts = { withCalls: 0, without: 0 };
      for (let k = 1; k < full.events.length; k++) {
        const resumed = await resumeCut(scenario, full.events, k);
        const { answered, inFlight } = cutAt(full.events, k);
        const where = `cut after ${k} events (${full.events[k - 1]!.type})`;
        expect(resumed.error?.name ?? null, where).toBe(scenario.error ?? null);
        // The log a crash left is kept byte for byte, then continued: seq k + 1 is the resume.
        expect(resumed.after.startsWith(resumed.text), where).toBe(true);
        const resume = resumed.events[k] as RunEventOf<'run.resumed'>;
        expect(resume.type, where).toBe('run.resumed');
        expect(resume.payload, where).toMatchObject({
          fromSeq: k,
          repeated: inFlight ? [inFlight.id] : [],
          discardedBytes: 0,
          logPath: resumed.path,
        });
        const lost = inFlight?.lostCalls ?? 0;
        if (scenario.options.maxTokens !== undefined && lost > 0) {
          // The calls lost in the crash count against the budget too: it stops the run no later.
          const made = decisions(resumed.events).slice(0, -1);
          expect(decisions(full.events).slice(0, made.length), where).toEqual(made);
          expect(closing(resumed.events).payload, where).toMatchObject({ reason: 'budget' });
        } else {
          expect(decisions(resumed.events), where).toEqual(decisions(full.events));
          // No answer the log holds is asked for again; the call in flight at the cut is.
          expect(resumed.calls, where).toBe(full.calls - callsOfFirst(full.events, answered));
        }
        // Every call made is recorded and counted, the lost ones too.
        const recordedCalls = callsIn(resumed.events);
        expect(resumed.calls, where).toBe(callsIn(resumed.events.slice(k)));
        const totals = closing(resumed.events).payload;
        expect(
          totals.byPhase.reduce((n, p) => n + p.calls, 0),
          where,
        ).toBe(recordedCalls);
        expect(
          totals.byPhase.reduce((n, p) => n + p.costUsd, 0),
          where,
        ).toBeCloseTo(0.01 * recordedCalls);
        if (scenario.options.maxTokens === undefined) {
          expect(recordedCalls, where).toBe(full.calls + lost);
          // The chart's usage (what budgets read) counts the lost calls too, those of a request
          // that failed included.
          expect(totals.usage.calls, where).toBe(closing(full.events).payload.usage.calls + lost);
        }
        if (inFlight) inFlightCuts[inFlight.lostCalls > 0 ? 'withCalls' : 'without']++;
      }
      // The cuts include calls in flight, with and without calls recorded before the crash.
      expect(inFlightCuts.without).toBeGreaterThan(0);
      if (scenario.name.startsWith('retries')) expect(inFlightCuts.withCalls).toBeGreaterThan(0);
    }, 60_000);
  }

  it('resumes a resumed run cut again, its earlier resume and lost calls included', async () => {
    const scenario = SCENARIOS[0]!;
    const full = await uninterrupted(scenario);
    // Cuts whose request in flight had made a call (a repair): the lost call stays in the log.
    const firstCuts = [...full.events.keys()].filter(
      (k) => k > 0 && (cutAt(full.events, k).inFlight?.lostCalls ?? 0) > 0,
    );
    expect(firstCuts.length).toBeGreaterThan(0);
    for (const k of [...firstCuts, 3, 20]) {
      const once = await resumeCut(scenario, full.events, k, `once-${k}`);
      for (let j = k + 1; j < Math.min(once.events.length, k + 5); j++) {
        const twice = await resumeCut(scenario, once.events, j, `twice-${k}-${j}`);
        const where = `cut after ${k}, resumed, cut after ${j}`;
        expect(twice.error?.name ?? null, where).toBe(null);
        expect(decisions(twice.events), where).toEqual(decisions(full.events));
        const resumes = twice.events.filter((e): e is RunEventOf<'run.resumed'> => e.type === 'run.resumed');
        expect(
          resumes.map((e) => e.payload.fromSeq),
          where,
        ).toEqual([k, j]);
        expect(twice.calls, where).toBe(
          full.calls - callsOfFirst(full.events, cutAt(once.events, j).answered),
        );
      }
    }
  }, 60_000);
});

describe('resume refuses, repairs and keeps time', () => {
  const scenario = SCENARIOS[0]!;

  /** Resumes `text` written as a log and says how it went, the file after, and the model calls. */
  async function resumeText(text: string, extra: PgeOptions = {}) {
    const path = join(dir, 'crashed.md');
    writeFileSync(path, text);
    const { model, pge } = harness(scenario, extra);
    const error = await settle(pge, () => pge.resume(path));
    return { path, error, after: readFileSync(path, 'utf8'), calls: model.requests.length, pge };
  }

  /** Events with new times from `ts(event)`. */
  const retimed = (events: readonly RunEvent[], ms: (event: RunEvent, i: number) => number) =>
    events.map((e, i) => ({ ...e, ts: new Date(ms(e, i)).toISOString() }) as RunEvent);

  it('refuses a run that has ended, a file that is not a log, and other models, before anything', async () => {
    const full = await uninterrupted(scenario);
    const ended = await resumeText(renderLog(full.events));
    expect(ended.error).toBeInstanceOf(ResumeError);
    expect(ended.error?.message).toMatch(
      /has already ended \(run\.completed at seq \d+\); there is nothing to resume/,
    );
    expect(ended.after).toBe(renderLog(full.events));
    expect(ended.calls).toBe(0);

    const notLog = await resumeText('# My notes\n\nnothing here\n');
    expect(notLog.error).toBeInstanceOf(ResumeError);
    expect(notLog.error?.message).toMatch(/is not a pge log/);

    const missing = harness(scenario);
    const gone = await settle(missing.pge, () => missing.pge.resume(join(dir, 'no-such-log.md')));
    expect(gone).toBeInstanceOf(ResumeError);

    const other = await resumeText(renderLog(full.events.slice(0, 10)), {
      generatorAgent: new ScriptedModel(scenario.script(), { name: 'another-model' }),
    });
    expect(other.error).toBeInstanceOf(ResumeError);
    expect(other.error?.message).toMatch(
      /used the models .*generator scripted-test-double.*this harness has .*generator another-model/,
    );
    expect(other.after).toBe(renderLog(full.events.slice(0, 10)));
  });

  it('refuses other workspace tools, validators or workspace than its run had, before anything; a log without them resumes', async () => {
    const first = join(dir, 'first');
    mkdirSync(first);
    const log = join(dir, 'acting.md');
    const run = harness(scenario, { sharedStatePath: log, workingDirectory: first });
    await settle(run.pge, () => run.pge.run('Write a guide'));
    const events = await readLogFile(log);
    const started = events[0] as RunEventOf<'run.started'>;
    const workspace = join(first, 'workspaces', started.runId);
    expect(started.payload.settings.acting).toEqual({ tools: true, validators: [], workspace });
    const cut = renderLog(events.slice(0, 10));

    const noTools = await resumeText(cut, { tools: false, workingDirectory: first });
    expect(noTools.error).toBeInstanceOf(ResumeError);
    expect(noTools.error?.message).toMatch(
      /its run had the workspace tools and no validator; this harness has no workspace tools and no validator/,
    );
    expect(noTools.after).toBe(cut);
    expect(noTools.calls).toBe(0);

    const checked = await resumeText(cut, { validators: ['test -s /dev/stdin'], workingDirectory: first });
    expect(checked.error).toBeInstanceOf(ResumeError);
    expect(checked.error?.message).toMatch(
      /this harness has the workspace tools and the validators "test -s \/dev\/stdin"/,
    );
    expect(checked.after).toBe(cut);

    // The run's files are in its workspace: a harness that would look elsewhere is refused.
    mkdirSync(workspace, { recursive: true });
    const elsewhere = await resumeText(cut, { workingDirectory: dir });
    expect(elsewhere.error).toBeInstanceOf(ResumeError);
    expect(elsewhere.error?.message).toContain(
      `its run's workspace is ${workspace}, where this harness would look for it in ${join(dir, 'workspaces', started.runId)}`,
    );
    expect(elsewhere.after).toBe(cut);
    // Moved away with its working directory, it is where the harness says.
    rmSync(workspace, { recursive: true });
    const moved = await resumeText(cut, { workingDirectory: dir });
    expect(moved.error).toBeNull();

    // A log written before the tools and validators were recorded: nothing to hold the resume to.
    const { acting: _, ...settings } = started.payload.settings;
    const older = [{ ...started, payload: { ...started.payload, settings } }, ...events.slice(1, 10)];
    const resumed = await resumeText(renderLog(older as RunEvent[]), { tools: false });
    expect(resumed.error).toBeNull();
  });

  it('refuses a log that the replay does not produce again, and writes nothing', async () => {
    const full = await uninterrupted(scenario);
    const retry = full.events.findIndex((e) => e.type === 'step.retry.scheduled');
    // A log that says the run allowed no retries, yet shows one: the code replaying it disagrees.
    const events = full.events
      .slice(0, retry + 3)
      .map((e) =>
        e.type === 'run.started'
          ? { ...e, payload: { ...e.payload, settings: { ...e.payload.settings, maxRetriesPerStep: 0 } } }
          : e,
      );
    const text = renderLog(events);
    const { error, after, calls } = await resumeText(text);
    expect(error).toBeInstanceOf(ResumeError);
    expect(error?.message).toContain(
      `disagree at seq ${retry + 1}: the log has step.retry.scheduled, the replay produced step.failed`,
    );
    expect(after).toBe(text);
    expect(calls).toBe(0);

    // A request that asked for something else than the run's own input.
    const asked = renderLog(
      full.events
        .slice(0, 12)
        .map((e) =>
          e.type === 'plan.requested'
            ? { ...e, payload: { ...e.payload, input: { ...e.payload.input, task: 'another task' } } }
            : e,
        ),
    );
    const request = await resumeText(asked);
    expect(request.error?.message).toContain(
      'disagree at seq 2: plan.requested differs at payload.input.task',
    );
    expect(request.after).toBe(asked);
    expect(request.calls).toBe(0);
  });

  it('replays a log that does not record its thresholds with the options, and refuses other thresholds', async () => {
    const full = await uninterrupted(scenario);
    const cut = full.events.findIndex((e) => e.type === 'step.work.requested');
    // A log written before run.started recorded the thresholds.
    const events = full.events.slice(0, cut).map((e) => {
      if (e.type !== 'run.started') return e;
      const { defaultThresholds: _d, fallbackThreshold: _f, ...settings } = e.payload.settings;
      return { ...e, payload: { ...e.payload, settings } };
    });
    const same = await resumeText(renderLog(events));
    expect(same.error).toBeNull();
    const other = await resumeText(renderLog(events), { fallbackThreshold: 9 });
    expect(other.error?.message).toMatch(
      /disagree at seq 6: plan\.created differs at payload\.criteria\[1\]\.threshold/,
    );
  });

  it('cuts the torn end of a write the crash cut short, and nothing else', async () => {
    const full = await uninterrupted(scenario);
    for (const k of [6, 14, 15]) {
      const chunk = renderEvent(full.events[k]!);
      const kept = renderLog(full.events.slice(0, k));
      // A power loss: the file ends inside the next event's section: in its text (which stays, as
      // text), in one of its fenced blocks, in its JSON, before its JSON block is closed.
      const cuts = [
        { at: chunk.indexOf('\n', 2), discarded: 0 },
        ...[chunk.indexOf('```') + 4, chunk.lastIndexOf('{') + 3, chunk.length - 2].map((at) => ({
          at,
          discarded: Buffer.byteLength(chunk.slice(0, at)),
        })),
      ];
      for (const { at, discarded } of cuts) {
        const torn = chunk.slice(0, at);
        const { error, after, pge } = await resumeText(kept + torn);
        const where = `event ${k + 1} torn after ${at} of ${chunk.length} characters`;
        expect(error, where).toBeNull();
        expect(after.startsWith(kept + torn.slice(0, torn.length - discarded)), where).toBe(true);
        const events = await readLogFile(join(dir, 'crashed.md'));
        const resume = events[k] as RunEventOf<'run.resumed'>;
        expect(resume.payload.discardedBytes, where).toBe(discarded);
        expect(decisions(events), where).toEqual(decisions(full.events));
        expect(pge.lastResult?.passed, where).toBe(true);
      }
    }
    // Damage with whole events after it is not a torn write: refused, and the file left as it was.
    const text = renderLog(full.events.slice(0, 20)).replace('"type":"step.started"', '"type":"step.startd"');
    const damaged = await resumeText(text);
    expect(damaged.error).toBeInstanceOf(ResumeError);
    expect(damaged.after).toBe(text);
  });

  it('does not count the time the process was dead, and counts the time before the crash', async () => {
    const budget = { maxDurationMs: 600_000 };
    const hour = 3_600_000;
    const full = await uninterrupted({ ...scenario, options: { ...scenario.options, ...budget } });
    const cut = full.events.findIndex((e) => e.type === 'step.contract.proposed') + 1;
    // Crashed an hour ago: the hour of downtime leaves the 10-minute budget whole.
    const crashed = retimed(full.events.slice(0, cut), (e) => Date.parse(e.ts) - hour);
    const later = await resumeText(renderLog(crashed));
    expect(later.error).toBeNull();
    const events = await readLogFile(later.path);
    const resume = events[cut] as RunEventOf<'run.resumed'>;
    expect(resume.payload.pausedMs).toBeGreaterThanOrEqual(hour);
    expect(closing(events).type).toBe('run.completed');
    expect(closing(events).payload.durationMs).toBeLessThan(60_000);
    expect(later.pge.lastResult?.totalDuration).toBeLessThan(60);

    // Eleven minutes of work before the crash: the proposal answered at 11 minutes breaks the
    // budget, and the resumed run stops before its next call.
    const started = Date.parse(full.events[0]!.ts);
    const proposed = full.events.findIndex((e) => e.type === 'step.contract.requested') + 1;
    const slow = retimed(full.events.slice(0, cut), (e, i) =>
      i >= proposed ? started + 660_000 : Date.parse(e.ts),
    );
    const stopped = await resumeText(renderLog(slow));
    expect(stopped.calls).toBe(0);
    const after = await readLogFile(stopped.path);
    expect(after[cut]?.type).toBe('run.resumed');
    expect(closing(after).type).toBe('run.failed');
    expect(closing(after).payload).toMatchObject({ reason: 'budget' });
    expect((closing(after) as RunEventOf<'run.failed'>).payload.message).toMatch(/maxDurationMs/);
    expect(closing(after).payload.durationMs).toBeGreaterThanOrEqual(660_000);
    expect(closing(after).payload.durationMs).toBeLessThan(720_000);
  });
});
