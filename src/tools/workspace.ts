import { existsSync, readdirSync, statSync } from 'node:fs';
import { lstat, mkdir, readFile, realpath, writeFile } from 'node:fs/promises';
import { basename, dirname, extname, isAbsolute, join, relative, resolve, sep } from 'node:path';
import type { ChatImage } from './tool-calls.js';
import { ToolError } from './tool-error.js';
import { WorkspaceClaims, type WorkspaceWriter } from './workspace-claims.js';
import { holding, WorkspaceLock } from './workspace-lock.js';

/**
 * A run's workspace as the tools see it: the files they list, read and write, inside it and
 * nowhere else, and pge's own hidden directory that they never show. A write takes the
 * workspace's lock shared (validators take it exclusive) and, when made for a step, claims its
 * path for that step (`workspace-claims.ts`).
 */

/**
 * The directory where pge keeps the state of the steps that share a workspace (which step holds
 * which path, and the lock), beside the workspaces rather than in one, so that a workspace holds
 * only what the steps wrote. In a workspace, a directory of that name is never listed, read or
 * written by the workspace tools, nor an image.
 */
export const HIDDEN_DIR = '.pge';

/** Where the state of workspace `dir`'s steps is kept: `<workspaces>/.pge/<run id>`. */
function stateDirOf(dir: string): string {
  return join(dirname(dir), HIDDEN_DIR, basename(dir));
}

/** The lock of the workspace `dir`: writes take it shared, a validator run exclusive. */
export function workspaceLock(dir: string): WorkspaceLock {
  return new WorkspaceLock(join(stateDirOf(dir), 'lock'));
}

/** A signal that never aborts, for a write whose caller has none. */
const NEVER = new AbortController().signal;

/** Images of the workspace an evaluator is shown at most, the latest first, and their size. */
export const MAX_IMAGES = 4;
export const MAX_IMAGE_BYTES = 4 * 1024 * 1024;
const IMAGE_TYPES: Readonly<Record<string, string>> = {
  '.png': 'image/png',
  '.jpg': 'image/jpeg',
  '.jpeg': 'image/jpeg',
  '.webp': 'image/webp',
};

/** Files listed at most, so that a listing stays readable, and directories read at most. */
const MAX_LISTED = 500;
/** Bytes of a file `read_file` reads at most. */
const MAX_READ_BYTES = 1_000_000;

/**
 * A run's workspace: a directory the tools may read and write, and nothing outside it. A path is
 * relative to the workspace; an absolute path, one that climbs out (`..`), one that reaches out
 * through a symbolic link, and one into `HIDDEN_DIR` are refused, never followed. With a `writer`,
 * each write claims its path for that step, and is refused when another step holds it.
 */
export class Workspace {
  constructor(
    readonly dir: string,
    private readonly writer?: WorkspaceWriter,
  ) {}

  /**
   * The workspace's files, relative paths with `/`, sorted. Listed synchronously: a listing is
   * small (at most `MAX_LISTED` files, from at most `MAX_LISTED` directories) and taken before every
   * acting call, where a trip through Node's thread pool per directory would cost more than the
   * listing itself.
   */
  list(): string[] {
    // The workspace is made by the first file written in it: a run that wrote none has none.
    if (statSync(this.dir, { throwIfNoEntry: false }) === undefined) return [];
    const files: string[] = [];
    let directories = 0;
    const walk = (at: string): void => {
      if (++directories > MAX_LISTED) return;
      for (const entry of readdirSync(join(this.dir, at), { withFileTypes: true })) {
        if (files.length >= MAX_LISTED) return;
        if (at === '' && entry.name === HIDDEN_DIR) continue;
        const path = at === '' ? entry.name : `${at}/${entry.name}`;
        if (entry.isDirectory()) walk(path);
        else if (entry.isFile()) files.push(path);
      }
    };
    walk('');
    return files.sort();
  }

  /**
   * Records the writer's step and what it depends on, for the steps that build on it to take over
   * its paths (`WorkspaceClaims.record`): done when its work begins, whether it writes or not,
   * once any step of the run has written.
   */
  async recordWriter(): Promise<void> {
    // An empty workspace (none made yet) holds no claim: every step before this one wrote
    // nothing, so there is nothing this step or those after it could take over, and a run whose
    // steps write nothing leaves no workspace behind.
    if (this.writer !== undefined && existsSync(this.dir)) await this.claims().record(this.writer);
  }

  async read(path: string): Promise<string> {
    return withoutHostPaths(path, () => this.readInside(path));
  }

  /**
   * The images of the workspace (png, jpeg, webp), the most recently written first: at most
   * `MAX_IMAGES`, each at most `MAX_IMAGE_BYTES` (a larger one is left out), with their paths.
   * `files` is the workspace's listing, when the caller has just made it (`list`).
   */
  async images(files?: readonly string[]): Promise<{ path: string; image: ChatImage }[]> {
    const found: { path: string; mtime: number; size: number }[] = [];
    for (const path of files ?? this.list()) {
      if (IMAGE_TYPES[extname(path).toLowerCase()] === undefined) continue;
      const info = await lstat(join(this.dir, path));
      if (info.isFile() && info.size <= MAX_IMAGE_BYTES)
        found.push({ path, mtime: info.mtimeMs, size: info.size });
    }
    found.sort((a, b) => b.mtime - a.mtime || a.path.localeCompare(b.path));
    return Promise.all(
      found.slice(0, MAX_IMAGES).map(async ({ path }) => ({
        path,
        image: {
          mediaType: IMAGE_TYPES[extname(path).toLowerCase()]!,
          base64: (await readFile(join(this.dir, path))).toString('base64'),
        },
      })),
    );
  }

  /**
   * Writes `content` to `path`, holding the workspace's lock shared (so never while a validator
   * runs: it waits, until `signal` aborts), after claiming the path for the writer's step.
   */
  async write(path: string, content: string, signal: AbortSignal = NEVER): Promise<string> {
    return withoutHostPaths(path, () =>
      holding(workspaceLock(this.dir).shared(signal), () => this.writeInside(path, content)),
    );
  }

  private claims(): WorkspaceClaims {
    return new WorkspaceClaims(stateDirOf(this.dir));
  }

  private async readInside(path: string): Promise<string> {
    const { target } = await this.inside(path, false);
    const info = await lstat(target).catch(() => null);
    if (info === null || !info.isFile()) throw new ToolError(`no file ${path} in the workspace`);
    if (info.size > MAX_READ_BYTES)
      throw new ToolError(`${path} has ${info.size} bytes; at most ${MAX_READ_BYTES} are read`);
    return readFile(target, 'utf8');
  }

  private async writeInside(path: string, content: string): Promise<string> {
    const { target, key } = await this.inside(path, true);
    if (this.writer !== undefined) await this.claims().claim(key, this.writer);
    await writeFile(target, content, 'utf8');
    return `wrote ${Buffer.byteLength(content)} bytes to ${path}`;
  }

  /**
   * The absolute path of `path` in the workspace, after checking that it stays inside and out of
   * `HIDDEN_DIR`: no `..` out of it, and its deepest existing part resolved through any links is in
   * it. With `create`, the directories that lead to it are made, and `key` is the path resolved
   * through links in them, with `/`, the same for every way of naming one file (what a claim holds).
   */
  private async inside(path: string, create: boolean): Promise<{ target: string; key: string }> {
    if (path === '' || isAbsolute(path) || path.includes('\0'))
      throw new ToolError(`${JSON.stringify(path)} is not a path in the workspace (give one relative to it)`);
    if (!create && !(await exists(this.dir)))
      throw new ToolError(`no file ${path} in the workspace (it is empty)`);
    await mkdir(this.dir, { recursive: true });
    const root = await realpath(this.dir);
    const target = resolve(root, path);
    const within = (p: string) => p === root || p.startsWith(root + sep);
    if (!within(target) || target === root) throw new ToolError(`${path} is outside the workspace`);
    const hidden = join(root, HIDDEN_DIR);
    const isHidden = (p: string) => p === hidden || p.startsWith(hidden + sep);
    const refuseHidden = (p: string) => {
      if (isHidden(p)) throw new ToolError(`${path} is in ${HIDDEN_DIR}, which pge keeps for itself`);
    };
    refuseHidden(target);
    // The deepest part that exists (the file itself, if it does), resolved through links, must be
    // inside too; a link that leads nowhere resolves to nothing and is refused.
    let existing = target;
    while (!(await exists(existing))) existing = dirname(existing);
    const real = await realpath(existing).catch(() => null);
    if (real === null || !within(real)) throw new ToolError(`${path} leads outside the workspace`);
    refuseHidden(real);
    if (!create) return { target, key: '' };
    const parent = dirname(target);
    await mkdir(parent, { recursive: true });
    const realParent = await realpath(parent);
    if (!within(realParent)) throw new ToolError(`${path} leads outside the workspace`);
    refuseHidden(realParent);
    return {
      target,
      key: relative(root, join(realParent, basename(target)))
        .split(sep)
        .join('/'),
    };
  }
}

function exists(path: string): Promise<boolean> {
  return lstat(path).then(
    () => true,
    () => false,
  );
}

/**
 * Runs a file operation on `path`, turning a failure of the file system (its message names the
 * host's absolute paths) into a `ToolError` that names only the workspace's.
 */
async function withoutHostPaths<T>(path: string, operation: () => Promise<T>): Promise<T> {
  try {
    return await operation();
  } catch (error) {
    if (error instanceof ToolError) throw error;
    const code = (error as NodeJS.ErrnoException).code ?? 'failed';
    throw new ToolError(`cannot use ${path} in the workspace (${code})`);
  }
}
