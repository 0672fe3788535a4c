import { describeEvent as describe, describeLine } from '../events/describe-event.js';
import type { RunEvent } from '../schemas/index.js';

/**
 * One line per event for the dashboard's timeline: the shared event description
 * (`src/events/describe-event.ts`), with the step in front and, where the event carries more
 * model text, an excerpt of it after a dash. Model text is cut short here (the step panels show
 * it whole); the line stays plain text, and the page shows it as text, never as HTML.
 */

const MAX_TEXT = 160;

/** `text` on one line, cut at `max` characters. */
function short(text: string, max = MAX_TEXT): string {
  const line = text.replace(/\s+/g, ' ').trim();
  return line.length > max ? `${line.slice(0, max - 1)}…` : line;
}

/** The timeline text of one event. */
export function describeEvent(event: RunEvent): string {
  const { excerpt } = describe(event);
  // The line itself carries model text too (a title, a problem, an error message): cut it as well.
  const head = short(describeLine(event), 2 * MAX_TEXT);
  const more = excerpt === null ? '' : short(excerpt);
  return more === '' ? head : `${head} — ${more}`;
}
