import { formatScores } from '../events/describe-event.js';
import type { RunEvent } from '../schemas/index.js';
import { describeEvent, formatRunUsage, newRunState, type RunState } from './event-lines.js';

/**
 * The progress display, fed by the `onEvent` option. On a terminal it keeps one live status line
 * (phase, step i/n, attempt k, the last scores against their thresholds, tokens and cost so far)
 * rewritten in place, with milestones printed above it; elsewhere (a pipe, a CI log) it prints one
 * plain line per meaningful event. It writes to stderr only: stdout carries the result alone.
 */

/** Where progress goes: stderr, or a fake in tests. */
export interface ProgressStream {
  write(text: string): unknown;
  columns?: number;
}

/** Options of `Progress`. */
export interface ProgressOptions {
  stream: ProgressStream;
  /** Rewrite one status line in place (a TTY) rather than print a line per event. */
  live: boolean;
  /** Print every event, requests and model calls included. */
  verbose: boolean;
  now?: () => number;
  /** How often the live line is redrawn to advance its clock; 0 never. */
  tickMs?: number;
}

/** Follows runs' events and shows them on `stream`. */
export class Progress {
  readonly #options: Required<ProgressOptions>;
  #state: RunState | null = null;
  /** The live line on screen, or null. */
  #shown: string | null = null;
  #timer: NodeJS.Timeout | null = null;

  constructor(options: ProgressOptions) {
    this.#options = { now: Date.now, tickMs: 1000, ...options };
  }

  /** The `onEvent` option. */
  readonly onEvent = (event: RunEvent): void => {
    const { now, verbose, live } = this.#options;
    if (event.type === 'run.started') this.#start(now());
    const state = this.#state;
    if (!state) return;
    const described = describeEvent(event, state, verbose);
    if (described && (!live || described.milestone || verbose)) this.#print(described.text);
    if (event.type === 'run.completed' || event.type === 'run.failed') this.#end();
    else this.#draw();
  };

  /**
   * Follows a resumed run: takes the events its log already holds as seen, without printing them,
   * so that the status line counts its steps, tokens and cost from the start.
   */
  resumeFrom(events: readonly RunEvent[]): void {
    this.#start(this.#options.now());
    for (const event of events) describeEvent(event, this.#state!, false);
  }

  /** Prints a line that stays (above the live line, if any). */
  note(text: string): void {
    this.#print(text);
    this.#draw();
  }

  /** Removes the live line and stops its clock; call it before printing anything else. */
  stop(): void {
    this.#clear();
    if (this.#timer) clearInterval(this.#timer);
    this.#timer = null;
  }

  /** The live status line for the run in progress, cut to the terminal's width. */
  render(): string {
    const s = this.#state;
    if (!s) return '';
    const where = s.step > 0 ? `step ${s.step}/${s.steps || '?'}` : 'plan';
    const parts = [`pge ${where}`];
    if (s.attempt > 0) parts.push(`attempt ${s.attempt}`);
    parts.push(s.phase);
    if (s.scores) parts.push(`last: ${formatScores(s.scores)}`);
    parts.push(formatRunUsage(s), `${((this.#options.now() - s.startedAt) / 1000).toFixed(0)}s`);
    const text = parts.join(' · ');
    const width = (this.#options.stream.columns || 80) - 1;
    return text.length > width ? `${text.slice(0, Math.max(0, width - 1))}…` : text;
  }

  #start(now: number): void {
    this.#state = newRunState(now);
    const { live, tickMs } = this.#options;
    if (live && tickMs > 0 && !this.#timer) {
      this.#timer = setInterval(() => this.#draw(), tickMs);
      // The clock must not keep the process alive once the run is over.
      this.#timer.unref();
    }
  }

  #print(text: string): void {
    this.#clear();
    const { live, now } = this.#options;
    const stamp = this.#state && !live ? `[${((now() - this.#state.startedAt) / 1000).toFixed(1)}s] ` : '';
    this.#options.stream.write(`${stamp}${text}\n`);
  }

  #end(): void {
    this.stop();
    this.#state = null;
  }

  #draw(): void {
    if (!this.#options.live || !this.#state) return;
    const text = this.render();
    if (text === this.#shown) return;
    this.#clear();
    this.#options.stream.write(text);
    this.#shown = text;
  }

  #clear(): void {
    if (this.#shown === null) return;
    // Carriage return, then erase the whole line: the next write starts on a clean line.
    this.#options.stream.write('\r\x1b[2K');
    this.#shown = null;
  }
}
