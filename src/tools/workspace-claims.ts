import { createHash, randomBytes } from 'node:crypto';
import { link, mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { ToolError } from './tool-error.js';

/**
 * Which step holds which path of a run's workspace, so that steps that run side by side never
 * write the same file. A step holds a path from its first write of it. A step may write a path
 * that no other step holds, or that only steps it builds on hold (its `dependsOn`, theirs, and so
 * on: they ended before it began, so it takes the path over), or that a step no longer in the plan
 * holds (a replan dropped it). Any other holder refuses the write, naming itself. The rule reads
 * the plan only, never the order in which steps happened to run, so a run's conflicts are the same
 * every time.
 *
 * Everything is kept in files, so that it holds between workers of other processes that share the
 * workspace:
 * - `steps/<step id>`: what a step depends on directly, recorded when its work begins (`record`),
 *   from which a later step finds every step it builds on (a work request names only its own
 *   step's dependencies). A step whose work never began wrote nothing, so it is a missing link
 *   only for the steps beyond it, which are then refused what they could have taken over.
 * - `claims/<hash of the path>/<step id>`: one directory per path, one file per step that holds
 *   it, made by exclusive create (a hard link, made only where no file is). A writer makes its own
 *   claim first and only then looks at the others', and withdraws a claim it just made when it
 *   finds a holder it may not take over from: of two steps that claim one path at once, at least
 *   one sees the other, so both may be refused (each then writes elsewhere), never both let through.
 */

/** The step a write is made for, as its work request tells it. */
export interface WorkspaceWriter {
  readonly stepId: string;
  readonly title: string;
  /** The steps it depends on directly (the plan's `dependsOn`). */
  readonly dependsOn: readonly string[];
  /** The ids of the current plan's steps: a holder not among them was dropped by a replan. */
  readonly planStepIds: readonly string[];
}

/** What a claim and a step's record hold. */
interface Claim {
  path: string;
  stepId: string;
  title: string;
}
interface StepRecord {
  stepId: string;
  dependsOn: string[];
}

function code(error: unknown): string | undefined {
  return (error as NodeJS.ErrnoException | null)?.code;
}

/** Reads a JSON file, or null when there is none. */
async function readJson<T>(path: string): Promise<T | null> {
  try {
    return JSON.parse(await readFile(path, 'utf8')) as T;
  } catch (error) {
    if (code(error) === 'ENOENT') return null;
    throw error;
  }
}

/** A name beside the files of `dir` for a file being written, which no step id can be. */
function draftIn(dir: string): string {
  return join(dir, `.draft-${randomBytes(8).toString('hex')}`);
}

/** The claims of a run's workspace, kept in `dir` (a hidden directory of it). */
export class WorkspaceClaims {
  constructor(private readonly dir: string) {}

  /** Records what `writer`'s step depends on, for the steps that build on it; done as its work begins. */
  async record(writer: WorkspaceWriter): Promise<void> {
    const steps = join(this.dir, 'steps');
    await mkdir(steps, { recursive: true });
    const record: StepRecord = { stepId: writer.stepId, dependsOn: [...writer.dependsOn] };
    // Written aside and renamed into place, so that a reader never sees half of it.
    const draft = draftIn(steps);
    await writeFile(draft, JSON.stringify(record));
    await rename(draft, join(steps, writer.stepId));
  }

  /** The steps `writer`'s step builds on, directly or through others, as far as their records tell. */
  async upstream(writer: WorkspaceWriter): Promise<Set<string>> {
    const found = new Set<string>();
    const next = [...writer.dependsOn];
    for (let id = next.pop(); id !== undefined; id = next.pop()) {
      if (found.has(id)) continue;
      found.add(id);
      const record = await readJson<StepRecord>(join(this.dir, 'steps', id));
      next.push(...(record?.dependsOn ?? []));
    }
    return found;
  }

  /**
   * Claims `path` (relative to the workspace, normalised, with `/`) for `writer`, or throws the
   * `ToolError` that names the step holding it.
   */
  async claim(path: string, writer: WorkspaceWriter): Promise<void> {
    const holders = join(this.dir, 'claims', createHash('sha256').update(path).digest('hex'));
    await mkdir(holders, { recursive: true });
    const mine = join(holders, writer.stepId);
    const claim: Claim = { path, stepId: writer.stepId, title: writer.title };
    // Written aside and linked into place: a link is made only where no file is (an exclusive
    // create, like `wx`), and a claim is never seen without its content.
    const draft = draftIn(holders);
    await writeFile(draft, JSON.stringify(claim));
    let made = true;
    try {
      await link(draft, mine);
    } catch (error) {
      if (code(error) !== 'EEXIST') throw error;
      made = false;
    } finally {
      await rm(draft, { force: true });
    }
    const upstream = await this.upstream(writer);
    const planned = new Set(writer.planStepIds);
    for (const stepId of (await readdir(holders)).sort()) {
      if (stepId.startsWith('.') || stepId === writer.stepId) continue;
      if (upstream.has(stepId) || !planned.has(stepId)) continue;
      const held = await readJson<Claim>(join(holders, stepId));
      // Withdrawn since the listing: that step was refused, and holds nothing.
      if (held === null) continue;
      if (made) await rm(mine, { force: true });
      throw new ToolError(
        `${JSON.stringify(path)} is held by step ${stepId} (${JSON.stringify(held.title)}); write elsewhere`,
      );
    }
  }
}
