/**
 * What the API (`src/api`) asks of a runtime about runs, beside the runtimes themselves: what a run
 * is started with, a handle on a run in progress, and a recorded run read back for a resume
 * or a replay. The API is built on the runtime and reaches the coordinator and the replay only
 * through here, so that they can move or change behind it.
 */

export { type RecordedRun, ReplayDivergence, readRecordedRun } from '../conductor/replay.js';
export type { RunHandle } from '../conductor/run-session.js';
export type { ResumeOptions, RunSpec } from '../conductor/run-spec.js';
