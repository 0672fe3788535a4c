/**
 * The layout of the help's own prose, to the width commander wraps the flags to: every line as
 * full as its words allow, so that no sentence breaks short of the width whatever its source's
 * line breaks.
 */

/** The width of the help (commander's `helpWidth`). */
export const HELP_WIDTH = 100;

/**
 * The words of `text` in lines of at most `HELP_WIDTH` characters (a longer word gets a line of its
 * own): the first after `first`, the others indented as far.
 */
export function wrap(text: string, first = '', indent = ' '.repeat(first.length)): string {
  const lines: string[] = [];
  let line = first;
  let empty = true;
  for (const word of text.split(/\s+/).filter((w) => w !== '')) {
    if (!empty && line.length + 1 + word.length > HELP_WIDTH) {
      lines.push(line);
      line = indent;
      empty = true;
    }
    line += empty ? word : ` ${word}`;
    empty = false;
  }
  lines.push(line);
  return lines.join('\n');
}

/**
 * A titled list (exit codes, the sources of configuration): each term with its text wrapped under
 * the column where the texts start, and a last paragraph, if any, under the terms.
 */
export function termList(
  title: string,
  items: readonly (readonly [term: string, text: string])[],
  after?: string,
): string {
  const width = Math.max(...items.map(([term]) => term.length)) + 2;
  const lines = items.map(([term, text]) => wrap(text, `  ${term.padEnd(width)}`));
  return [wrap(title), ...lines, ...(after === undefined ? [] : [wrap(after, '  ')])].join('\n');
}
