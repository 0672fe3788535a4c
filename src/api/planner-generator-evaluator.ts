import { existsSync, readFileSync, statSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { hostname } from 'node:os';
import { basename, dirname, extname, join, resolve } from 'node:path';
import type { InspectionEvent } from 'xstate';
import { subscribeEvents } from '../bus/channels.js';
import { ConfigurationError, errorFromInfo, type LogWriteError, ResumeError } from '../errors.js';
import type { RunOutcome } from '../machines/run-machine.js';
import { readLogRunId } from '../persistence/log-reader.js';
import type { Model } from '../roles/model.js';
import type { Continuation } from '../runtime/continue-run.js';
import { readCrashedLog } from '../runtime/crashed-log.js';
import { type EmbeddedHost, startEmbeddedHost } from '../runtime/embedded-host.js';
import type { ForkSettings } from '../runtime/fork-log.js';
import { newRunId } from '../runtime/run-id.js';
import { ReplayDivergence, type RunHandle, type RunSpec, readRecordedRun } from '../runtime/runs.js';
import { checkTask } from '../runtime/task.js';
import {
  ApprovalDecision,
  type ApprovalGate,
  type GivenPlan,
  Operator,
  type PlanDocument,
  type PlanDocumentInput,
  type Role,
  type RunActing,
  type RunEvent,
  type RunEventOf,
  runSettingsOf,
} from '../schemas/index.js';
import { otlpRequested } from '../telemetry/otlp-env.js';
import type { RunTracing } from '../telemetry/run-tracing.js';
import type { WorkTracing } from '../telemetry/work-tracing.js';
import { embeddedWorkersOf } from './host.js';
import {
  actingOf,
  type PgeOptions,
  type ResolvedOptions,
  resolveOptions,
  WORKSPACES_DIR,
  workingDirectoryOf,
} from './options.js';
import { formatOutput, type OutputType, type RunOutput } from './output.js';
import { givenPlanOf } from './plan-file.js';
import { buildResult, type HarnessResult } from './result.js';
import { buildRoleModels } from './role-models.js';

/**
 * The public entry point, with the reference's surface: `new PlannerGeneratorEvaluator(options)`,
 * `run(task)`, `batchedRun(tasks)`, `lastResult`. Runs on the embedded runtime (one process, the
 * in-process bus); every run gets its own id and its own log, and a log is never overwritten.
 */

/** Options of `fork`. */
export interface ForkOptions {
  /** The step (1-based, as the parent's plan numbers it) from which models are called again. */
  fromStep: number;
  /** The fork's log (default `<workingDirectory>/pge_shared_state_<runId>.md`); never overwritten. */
  logPath?: string;
  /** Settings that differ from the parent's (its recorded ones stand for the rest). */
  settings?: ForkSettings;
  /** Who forks the run, by name: the fork's `run.started` records it as `startedBy`. */
  startedBy?: string;
}

/** Options of `run`. */
export interface RunOptions {
  /** Who starts the run, by name (a dashboard's operator): its `run.started` records it as `startedBy`. */
  startedBy?: string;
}

/** A `startedBy` given to `run` or `fork`, checked before anything is asked or written. */
function checkedStarter(startedBy: string | undefined): string | undefined {
  if (startedBy !== undefined && !Operator.safeParse(startedBy).success)
    throw new ConfigurationError('startedBy must be a name of 1 to 200 characters');
  return startedBy;
}

/** Options of `continue`. */
export interface ContinueOptions {
  /**
   * The plan the new run follows, if not the earlier run's (an edited copy): a path, a plan
   * document, or one already read. Steps it adds run, steps it drops are gone, steps it changes
   * run again, with every step that depends on them; so does every step if it changes the rubric.
   */
  plan?: string | PlanDocumentInput | GivenPlan;
  /** The new run's log (default `<workingDirectory>/pge_shared_state_<runId>.md`); never overwritten. */
  logPath?: string;
  /** Told what the new run keeps and runs, before it starts (the CLI prints it). */
  onContinuation?: (continuation: Continuation) => void;
}

export class PlannerGeneratorEvaluator<T extends OutputType = OutputType> {
  /** The options after validation and defaults. */
  readonly options: ResolvedOptions & { outputType: T };
  /** The result of the last finished run, or null. */
  lastResult: HarnessResult | null = null;
  private readonly models: Record<Role, Model>;
  private runtime: EmbeddedHost | null = null;
  private readonly logErrors = new Map<string, LogWriteError>();
  /** Tracing, set up before the first run (`prepareTracing`): the observer of every event, and the exporter's stop. */
  private tracing: Promise<void> | null = null;
  private runTracing: RunTracing | undefined;
  private workTracing: WorkTracing | undefined;
  private stopTracing: (() => Promise<void>) | undefined;
  /** The runs going on in this instance, by id. */
  private readonly running = new Map<string, RunHandle>();
  private inspect: ((event: InspectionEvent) => void) | null = null;

  /**
   * Validates every option first: on a bad one it throws `ConfigurationError` and creates nothing.
   * The `outputType` given types what `run` returns (`'final'`: a string); left out, `run` is typed
   * by every output type, although at run time it returns the default's (`dict`).
   */
  constructor(options: PgeOptions & { outputType?: T } = {}) {
    const resolved = resolveOptions(options) as ResolvedOptions & { outputType: T };
    this.models = buildRoleModels(resolved);
    // The key lives in the model clients only: `options` is public and ends up in logs and dumps.
    this.options = { ...resolved, apiKey: resolved.apiKey === undefined ? undefined : '(set)' };
  }

  /** The harness's id (option `id`), reported with each result. */
  get id(): string {
    return this.options.id;
  }

  /** The model name each role reports. */
  get modelNames(): Record<Role, string> {
    return {
      planner: this.models.planner.name,
      generator: this.models.generator.name,
      evaluator: this.models.evaluator.name,
    };
  }

  /**
   * Runs one task to its end and returns it formatted by `outputType`; `lastResult` holds the
   * details. Rejects with the run's error when a model or the log failed; a run that finished with
   * failed steps resolves, with `lastResult.passed` false.
   */
  async run(task: string, options: RunOptions = {}): Promise<RunOutput<T>> {
    const startedBy = checkedStarter(options.startedBy);
    const path = this.options.sharedStatePath ? resolve(this.options.sharedStatePath) : null;
    return this.runOne(task, path, false, undefined, startedBy);
  }

  /**
   * Asks the planner alone for a plan of `task` (`pge plan`): one planner request, as a run's
   * planning makes it (the role's prompt, repairs, the `maxSteps` cut, the fixed rubric `criteria`
   * if given), and no other role, no run and no log. Returns the plan as a plan document, with the
   * thresholds a run of this instance would enforce and the shipped JSON Schema as its `$schema`
   * (`PLAN_DOCUMENT_SCHEMA_REF`): written to a file, edited if need be, it is what the `plan` option
   * and `pge run --plan` take. Rejects with the planner's error as a run would fail with it.
   */
  async plan(task: string): Promise<PlanDocument> {
    const { planAlone } = await import('./plan-alone.js');
    return planAlone(task, this.options, this.models.planner);
  }

  /**
   * Continues a run whose process died (killed, a power loss) from its log, in the same file: the
   * charts are rebuilt from the log's events without asking any model again for an answer the log
   * holds; only a call in flight at the crash is asked again. The run keeps the settings its log
   * recorded (bounds, thresholds, budgets); the models are this instance's, and must have the names
   * the log recorded. So must its workspace tools (on or off) and its validators (by name, in
   * order), and its workspace while that is where the log says, where the log recorded them
   * (`run.started`'s `settings.acting`). Time the process was dead does not count in the run's
   * duration or against `maxDurationMs`; the recorded calls count in its usage and budgets.
   * Returns what `run` returns.
   *
   * Throws `ResumeError` (a `ConfigurationError`) before anything is asked or written when the log
   * cannot be resumed: not a pge log, damaged beyond a torn last write, a run that has ended, other
   * models, tools, validators or workspace, or a log that this version of pge, replaying it, does
   * not produce again. Resume a run only once its process is gone: two processes must never write
   * one log.
   */
  async resume(logPath: string): Promise<RunOutput<T>> {
    const path = resolve(logPath);
    const { bytes, text, tail } = await readCrashedLog(path, 'resume');
    const recorded = readRecordedRun(tail.events, path);
    const { runId } = recorded;
    const models = recorded.started.payload.settings.models;
    const mine = this.modelNames;
    if ((['planner', 'generator', 'evaluator'] as const).some((role) => models[role] !== mine[role])) {
      const named = (m: Record<Role, string>) =>
        `planner ${m.planner}, generator ${m.generator}, evaluator ${m.evaluator}`;
      throw new ResumeError(
        `cannot resume ${path}: its run used the models ${named(models)}; this harness has ${named(mine)}. Resume it with the same models`,
      );
    }
    const acting = recorded.started.payload.settings.acting;
    const ours = actingOf(this.options, runId);
    if (acting !== undefined && !sameActing(acting, ours)) {
      throw new ResumeError(
        `cannot resume ${path}: its run had ${describeActing(acting)}; this harness has ${describeActing(ours)}. ` +
          'Resume it with the same (the tools and validators options; on the command line --validate and --no-tools)',
      );
    }
    // The workspace holds the run's files while it is where the log says (a run with neither tools
    // nor validators has none to lose); once moved with its working directory, it is where it went.
    if (
      acting !== undefined &&
      acting.workspace !== ours.workspace &&
      (acting.tools || acting.validators.length > 0) &&
      existsSync(acting.workspace)
    ) {
      throw new ResumeError(
        `cannot resume ${path}: its run's workspace is ${acting.workspace}, where this harness would look for it in ${ours.workspace}. ` +
          `Resume it with the working directory it had, ${workingDirectoryOf(acting)} (workingDirectory; pge resume takes it from the log)`,
      );
    }
    if (this.running.has(runId)) throw new ResumeError(`run ${runId} is running in this process`);
    await this.prepareTracing();
    const runtime = this.ensureRuntime();
    const o = this.options;
    const handle = runtime.service.resumeRun(recorded, {
      owner: `${hostname()}:${process.pid}`,
      logPath: path,
      // The torn end is cut by the log's writer when it opens the file, once the replay agreed.
      discardedBytes: bytes.length - Buffer.byteLength(text.slice(0, tail.end)),
      defaults: { defaultThresholds: o.defaultThresholds, fallbackThreshold: o.fallbackThreshold },
    });
    // The run's own duration: the time before the crash and after the resume.
    return this.finish(handle, recorded.started.payload.task, path, (outcome) => outcome.totals.durationMs);
  }

  /**
   * Forks a recorded run at step `fromStep`: a new run, with its own id and log, that takes the
   * parent's plan and every event before the step's start from the parent's log (replayed, never
   * asked of a model again) and calls models from that step on. Its `run.started` names its parent.
   * The fork's models are this instance's; its other settings are the parent's, except those given
   * in `settings`, which must leave the steps before `fromStep` as they were (else the fork is
   * refused with the first difference, before any model is called). The run's workspace starts as a
   * copy of the parent's, as the parent left it. Returns what `run` returns.
   */
  async fork(logPath: string, options: ForkOptions): Promise<RunOutput<T>> {
    const startedBy = checkedStarter(options.startedBy);
    const parentPath = resolve(logPath);
    const { forkDivergence, forkLog } = await import('../runtime/fork-log.js');
    const runId = newRunId();
    const path = resolve(
      options.logPath ?? join(this.options.workingDirectory, `pge_shared_state_${runId}.md`),
    );
    checkLogPath(path, `the log of the fork ${runId}`);
    await forkLog({
      parentPath,
      fromStep: options.fromStep,
      runId,
      logPath: path,
      models: this.modelNames,
      acting: actingOf(this.options, runId),
      settings: options.settings ?? {},
      workspaces: join(this.options.workingDirectory, WORKSPACES_DIR),
      ...(startedBy === undefined ? {} : { startedBy }),
    });
    try {
      return await this.resume(path);
    } catch (error) {
      if (!(error instanceof ResumeError)) throw error;
      // Refused before anything was asked: the fork leaves no log or workspace behind.
      await rm(path, { force: true });
      await rm(join(this.options.workingDirectory, WORKSPACES_DIR, runId), { recursive: true, force: true });
      if (!(error instanceof ReplayDivergence)) throw error;
      throw forkDivergence(parentPath, options.fromStep, error);
    }
  }

  /**
   * Carries a job on (`pge continue`): a new run, with its own id and log, of the plan of the ended
   * run logged at `logPath` (or of `options.plan`, an edited copy). No planner is asked. The steps
   * that passed are kept, with their artifacts and the files of the run's workspace, which the new
   * run's starts as a copy of; a step that failed or was exhausted runs again, and so does every
   * step that depends on a step that runs. The new run's log names the earlier one, and its job: the
   * earlier run's, one run further. Settings are this instance's. Returns what `run` returns.
   *
   * Throws `ResumeError` when the log holds no ended run (a run whose process died is resumed,
   * not continued), `ConfigurationError` when the plan is bad or every step already passed.
   */
  async continue(logPath: string, options: ContinueOptions = {}): Promise<RunOutput<T>> {
    const path = resolve(logPath);
    const { continuationOf, copyWorkspace, rubricBy } = await import('../runtime/continue-run.js');
    // A log torn by a crash is read up to its last whole event: such a run is said not to have ended.
    const { events } = (await readCrashedLog(path, 'continue')).tail;
    const edited = options.plan === undefined ? null : givenPlanOf(options.plan);
    const o = this.options;
    const continuation = await continuationOf(events, path, edited, rubricBy(o));
    options.onContinuation?.(continuation);
    const runId = newRunId();
    const log = resolve(options.logPath ?? join(o.workingDirectory, `pge_shared_state_${runId}.md`));
    const acting = actingOf(o, runId);
    if (o.tools)
      await copyWorkspace(
        events[0] as RunEventOf<'run.started'>,
        join(o.workingDirectory, WORKSPACES_DIR),
        acting.workspace,
      );
    const { plan, continues, job, task } = continuation;
    return this.runOne(task, log, false, { runId, plan, continues, job });
  }

  /** Runs tasks one after another, each with its own run id and log; returns their outputs. */
  async batchedRun(tasks: readonly string[]): Promise<RunOutput<T>[]> {
    for (const task of tasks) checkTask(task, this.options.maxTaskBytes);
    const outputs: RunOutput<T>[] = [];
    for (const task of tasks) outputs.push(await this.runOne(task, null, true));
    return outputs;
  }

  /**
   * Attaches XState inspection to the actors of every later run: the run and step statecharts
   * (`@statelyai/inspect`'s `inspector.inspect`, or any function of `InspectionEvent`). Call it
   * before the first run, or after `close()`: a running runtime keeps the inspector it started with.
   */
  attachInspector(inspect: (event: InspectionEvent) => void): void {
    if (this.runtime) throw new ConfigurationError('attachInspector must be called before the first run');
    this.inspect = inspect;
  }

  /**
   * A person's decision at the gate run `runId` waits at (`approve` option): `approve`, or
   * `reject` with a reason the planner or the generator is told. Returns false when the run is not
   * going on in this instance or waits at no gate `gate` (the decision is then not applied).
   */
  approve(
    runId: string,
    gate: ApprovalGate,
    decision: { decision: 'approve' | 'reject'; reason?: string; by?: string; requestId?: string },
  ): boolean {
    // Checked here, not when the run records it: a decision the log cannot hold would end the run.
    const checked = ApprovalDecision.safeParse({
      decision: decision.decision,
      reason: decision.reason ?? null,
      by: decision.by ?? 'api',
    });
    if (!checked.success)
      throw new ConfigurationError(
        `approve: ${checked.error.issues.map((i) => `${i.path.join('.')}: ${i.message}`).join('; ')}`,
      );
    return this.running.get(runId)?.decide(gate, checked.data, decision.requestId) ?? false;
  }

  /** The gates runs of this instance wait at: the run, the gate and the request's id. */
  pendingApprovals(): { runId: string; gate: ApprovalGate; requestId: string }[] {
    return [...this.running].flatMap(([runId, run]) =>
      run.waitingAt().map((waiting) => ({ runId, ...waiting })),
    );
  }

  /**
   * Interrupts every run in progress; each ends as `interrupted` with a consistent log, `reason`
   * (when given) in its closing event.
   */
  interrupt(reason?: string): void {
    for (const run of this.running.values()) run.interrupt(reason);
  }

  /**
   * Cancels run `runId` of this instance, as `pge cancel` does on a deployment: every step running
   * stops and its call is cancelled, and the run ends `cancelled`, its closing event naming `by`
   * and `reason`. False when no such run is in progress here.
   */
  cancel(runId: string, by: string, reason?: string): boolean {
    const run = this.running.get(runId);
    run?.cancel(by, reason);
    return run !== undefined;
  }

  /** Stops the workers and closes the logs. The instance can run again afterwards. */
  async close(): Promise<void> {
    const runtime = this.runtime;
    this.runtime = null;
    // A run still going is one its caller gave up: its calls are aborted and it is left as it is.
    await runtime?.close('leave');
    // The spans still queued go out before the process may end.
    const stop = this.stopTracing;
    this.stopTracing = undefined;
    this.tracing = null;
    this.runTracing = undefined;
    this.workTracing = undefined;
    await stop?.();
  }

  /**
   * Starts a run of `task` and waits for it; a continued run (`continue`) comes with its id, plan,
   * job and the run it continues; a run started by a person's name, with `startedBy`.
   */
  private async runOne(
    task: string,
    fixedPath: string | null,
    batch = false,
    continued?: { runId: string; plan: GivenPlan } & Pick<RunSpec, 'continues' | 'job'>,
    startedBy?: string,
  ): Promise<RunOutput<T>> {
    checkTask(task, this.options.maxTaskBytes);
    const runId = continued?.runId ?? newRunId();
    const logPath = fixedPath ?? this.defaultLogPath(runId, batch);
    // Checked before any model is called: the directory may have gone since the options were
    // checked, and a file there means the run id was used already (a log is never reused).
    checkLogPath(logPath, this.options.sharedStatePath ? 'sharedStatePath' : `the log of run ${runId}`);
    await this.prepareTracing();
    const runtime = this.ensureRuntime();
    const started = performance.now();
    const o = this.options;
    const handle = await runtime.service.startRun({
      runId,
      task,
      logPath,
      settings: runSettingsOf(continued === undefined ? o : { ...o, plan: continued.plan }, {
        models: this.modelNames,
        acting: actingOf(o, runId),
      }),
      continues: continued?.continues,
      job: continued?.job,
      startedBy,
    });
    return this.finish(handle, task, logPath, () => performance.now() - started);
  }

  /** Waits for a run started or resumed, builds `lastResult`, and returns the output or throws the run's error. */
  private async finish(
    handle: RunHandle,
    task: string,
    logPath: string,
    durationMs: (outcome: RunOutcome) => number,
  ): Promise<RunOutput<T>> {
    const { runId } = handle;
    const runtime = this.runtime!;
    this.running.set(runId, handle);
    try {
      const outcome = await handle.done;
      await runtime.bus.flush();
      // The last events may still be on their way to the disk while the result is built.
      const result = buildResult(this.options.id, runId, logPath, outcome, handle.calls, 0);
      await runtime.persistence.flushed(runId);
      const logError = this.logErrors.get(runId);
      if (logError) throw logError;
      result.totalDuration = durationMs(outcome) / 1000;
      this.lastResult = result;
      if (outcome.status === 'failed' && outcome.error) throw errorFromInfo(outcome.error);
      return formatOutput(this.options.outputType, task, result);
    } finally {
      this.running.delete(runId);
      this.logErrors.delete(runId);
    }
  }

  private defaultLogPath(runId: string, batch: boolean): string {
    const fixed = this.options.sharedStatePath;
    if (batch && fixed) {
      // One log per task: the run id goes before the extension of the configured path.
      const path = resolve(fixed);
      const ext = extname(path);
      return join(dirname(path), `${basename(path, ext)}-${runId}${ext || '.md'}`);
    }
    return join(this.options.workingDirectory, `pge_shared_state_${runId}.md`);
  }

  /**
   * Sets tracing up once, before the first run: the `tracer` option's, else OTLP export when the
   * environment asks for it (`OTEL_EXPORTER_OTLP_ENDPOINT`), loaded only then.
   */
  private prepareTracing(): Promise<void> {
    this.tracing ??= (async () => {
      let tracer = this.options.tracer;
      if (tracer === undefined) {
        if (!otlpRequested(process.env)) return;
        const otlp = (await import('../telemetry/otlp.js')).otlpTracer();
        tracer = otlp.tracer;
        this.stopTracing = otlp.shutdown;
      }
      this.runTracing = (await import('../telemetry/run-tracing.js')).traceRuns(tracer);
      this.workTracing = (await import('../telemetry/work-tracing.js')).traceWork(tracer);
    })();
    return this.tracing;
  }

  private ensureRuntime(): EmbeddedHost {
    if (this.runtime) return this.runtime;
    const o = this.options;
    this.runtime = startEmbeddedHost({
      ...embeddedWorkersOf(o, this.models),
      settings: o,
      acting: (runId) => actingOf(o, runId),
      ...(this.inspect ? { inspect: this.inspect } : {}),
      ...(this.runTracing ? { tracing: this.runTracing } : {}),
      ...(this.workTracing ? { workTracing: this.workTracing } : {}),
      onLogError: (runId, error) => this.logErrors.set(runId, error),
    });
    if (o.onEvent || o.verbose) {
      // One subscription for every run of this instance, set up once: see createCoordinator.
      subscribeEvents(this.runtime.bus, '*', (event) => {
        o.onEvent?.(event);
        if (o.verbose) console.error(describe(event));
      });
    }
    return this.runtime;
  }
}

/** The run whose log `path` is (`readLogRunId`); null for any other file, or one it cannot read. */
function logOwner(path: string): string | null {
  try {
    return readLogRunId(readFileSync(path, 'utf8'));
  } catch {
    return null;
  }
}

/** A log path must be free: pge never truncates a file, a log of another run or anything else. */
function checkLogPath(path: string, what: string): void {
  if (existsSync(path) && statSync(path).isFile()) {
    const owner = logOwner(path);
    const held = owner === null ? 'already exists' : `already holds run ${owner}`;
    throw new ConfigurationError(`${what} ${path} ${held}; pge never overwrites a file`);
  }
  if (!existsSync(dirname(path)))
    throw new ConfigurationError(`the directory of ${what} ${path} does not exist`);
}

/** One line per event for `verbose`. */
function describe(event: RunEvent): string {
  return `[pge ${event.runId} #${event.seq}] ${event.type}`;
}

/** Whether two runs' acting roles had the same tools and the same validators, in the same order. */
function sameActing(a: RunActing, b: RunActing): boolean {
  return (
    a.tools === b.tools &&
    a.validators.length === b.validators.length &&
    a.validators.every((name, i) => name === b.validators[i])
  );
}

/** What a run's acting roles had, in words. */
function describeActing({ tools, validators }: RunActing): string {
  const named =
    validators.length === 0
      ? 'no validator'
      : `the validators ${validators.map((v) => JSON.stringify(v)).join(', ')}`;
  return `${tools ? 'the workspace tools' : 'no workspace tools'} and ${named}`;
}
