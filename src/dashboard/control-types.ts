import type { RunView } from './run-view-types.js';

/**
 * What the page of `pge dashboard --control` is told it may do: at all (`/api/control`), and for
 * the run it shows (the `control` of each view). Types only, shared by the server and the page.
 */

/** What the page may offer for one run. */
export interface RunAbilities {
  /** Approve, reject and cancel: the run is going on, and this dashboard can reach who drives it. */
  act: boolean;
  /** Fork from a step: the run has ended (embedded: and its log is readable here). */
  fork: boolean;
}

/** What the page may offer at all. */
export interface ControlAbilities {
  /** Fork runs: embedded, from their logs; on NATS, by the deployment's coordinators. */
  fork: boolean;
  /** The model a started run uses unless the form names one; null: the form may not name one (the workers hold the models). */
  model: string | null;
  /** Where runs started from the page run: `embedded` (this process) or `nats`. */
  where: 'embedded' | 'nats';
}

/** `/api/control`: who acts, and what the page may offer. */
export interface ControlInfo {
  operator: string;
  abilities: ControlAbilities;
}

/** A run's view as a dashboard with `--control` sends it: with what may be done to the run. */
export type ControlledView = RunView & { control?: RunAbilities };

/** The header that carries the dashboard's token on every action. */
export const TOKEN_HEADER = 'X-PGE-Token';
