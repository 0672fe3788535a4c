import { existsSync, mkdirSync, readFileSync, rmdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

/**
 * A CPU budget for child processes, as a container's limit gives one (`cpus: 0.25` in a compose
 * file, a CPU limit in Kubernetes): a Linux cgroup of their own with a CFS quota, so that they get
 * at most `cpus` of a core per period however idle the machine is. This is how the bench shows a
 * process's scale-out on a machine with fewer cores than the deployment it models: each process
 * given the same budget, one against two.
 *
 * Needs a writable cgroup file system (root, or a delegated subtree): cgroup v2's `cpu.max`, or
 * v1's `cpu.cfs_quota_us`. Where neither can be written, `createCpuLimit` says why.
 */

/** CFS period, microseconds: the kernel's default. */
const PERIOD_US = 100_000;
const ROOT = '/sys/fs/cgroup';

/** A cgroup with a CPU quota; processes are moved in with `add`. */
export interface CpuLimit {
  readonly cpus: number;
  readonly path: string;
  /** Moves process `pid` (all its threads) into the cgroup. */
  add(pid: number): void;
  /** Removes the cgroup; its processes must have exited. Never throws. */
  remove(): void;
}

/** Where a cgroup with a CPU quota can be made: v2 (unified at the root) or v1's cpu controller. */
function cpuHierarchy(): { version: 2; dir: string } | { version: 1; dir: string } | null {
  const v2 = join(ROOT, 'cgroup.controllers');
  if (existsSync(v2)) {
    return readFileSync(v2, 'utf8').split(/\s+/).includes('cpu') ? { version: 2, dir: ROOT } : null;
  }
  const v1 = join(ROOT, 'cpu');
  return existsSync(join(v1, 'cpu.cfs_quota_us')) ? { version: 1, dir: v1 } : null;
}

/** A cgroup named `name` whose processes get at most `cpus` cores, or why there can be none. */
export function createCpuLimit(name: string, cpus: number): CpuLimit | { unavailable: string } {
  if (!(cpus > 0)) throw new RangeError(`cpus must be above 0, got ${cpus}`);
  const hierarchy = cpuHierarchy();
  if (hierarchy === null) return { unavailable: `no cgroup cpu controller under ${ROOT}` };
  const path = join(hierarchy.dir, name);
  const quota = Math.round(cpus * PERIOD_US);
  try {
    mkdirSync(path);
  } catch (error) {
    return { unavailable: `cannot make the cgroup ${path}: ${(error as Error).message}` };
  }
  try {
    if (hierarchy.version === 2) {
      writeFileSync(join(path, 'cpu.max'), `${quota} ${PERIOD_US}`);
    } else {
      writeFileSync(join(path, 'cpu.cfs_period_us'), String(PERIOD_US));
      writeFileSync(join(path, 'cpu.cfs_quota_us'), String(quota));
    }
  } catch (error) {
    rmdirSync(path);
    return { unavailable: `cannot set the CPU quota of ${path}: ${(error as Error).message}` };
  }
  return {
    cpus,
    path,
    add: (pid) => writeFileSync(join(path, 'cgroup.procs'), String(pid)),
    remove: () => {
      try {
        rmdirSync(path);
      } catch {
        // A process still in it (not yet reaped): the kernel keeps the empty group, harmless.
      }
    },
  };
}
