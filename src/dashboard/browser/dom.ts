/**
 * DOM helpers of the dashboard page. Run data enters the DOM only as `textContent` or as the value
 * of a fixed, harmless attribute, never as markup: model text is shown, not interpreted.
 */

const SVG_NS = 'http://www.w3.org/2000/svg';

/** The page's element with `id`: the page (assets/page.ts) has every one the script names. */
export function byId<T extends HTMLElement = HTMLElement>(id: string): T {
  const node = document.getElementById(id);
  if (!node) throw new Error(`the dashboard page has no #${id}`);
  return node as T;
}

/** An HTML element with an optional class and text. */
export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  cls?: string | null,
  text?: string | number | null,
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (cls) node.className = cls;
  if (text !== undefined && text !== null) node.textContent = String(text);
  return node;
}

/** An SVG element with its attributes. */
export function svg<K extends keyof SVGElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | number> = {},
): SVGElementTagNameMap[K] {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  return node;
}

/** An SVG text at (x, y). */
export function svgText(x: number, y: number, text: string | number, cls?: string): SVGTextElement {
  const node = svg('text', { x, y });
  if (cls) node.setAttribute('class', cls);
  node.textContent = String(text);
  return node;
}

/** A number rounded to two decimals, or a dash for none. */
export function num(n: number | null | undefined): string {
  return n === null || n === undefined ? '—' : String(Math.round(n * 100) / 100);
}

export function usd(n: number): string {
  return `$${n.toFixed(4)}`;
}

/** Milliseconds as seconds with one decimal, or a dash for none. */
export function secs(ms: number | null | undefined): string {
  return ms === null || ms === undefined ? '—' : `${(ms / 1000).toFixed(1)} s`;
}

/** A status pill; its class defaults to its text (`passed`, `failed`, …), which the stylesheet colours. */
export function pill(text: string, cls?: string): HTMLSpanElement {
  return el('span', `pill ${cls ?? text}`, text);
}

/** A cell of a table or a fact: a node, or a value shown as text (a dash for null). */
export type Cell = Node | string | number | null;

function fill(parent: HTMLElement, cell: Cell): void {
  if (cell instanceof Node) parent.append(cell);
  else parent.textContent = cell === null ? '—' : String(cell);
}

/** A definition list of the rows whose value is not null or undefined. */
export function facts(rows: readonly (readonly [string, Cell | undefined])[]): HTMLDListElement {
  const dl = el('dl', 'facts');
  for (const [name, value] of rows) {
    if (value === null || value === undefined) continue;
    const dd = el('dd');
    fill(dd, value);
    dl.append(el('dt', null, name), dd);
  }
  return dl;
}

export function list(items: readonly string[], cls = 'plain'): HTMLUListElement {
  const ul = el('ul', cls);
  for (const item of items) ul.append(el('li', null, item));
  return ul;
}

/** Keys of the `<details>` the user opened: a re-render keeps them open. */
const openDetails = new Set<string>();

/** A `<details>` that stays open across re-renders once the user opened it. */
export function details(key: string, summary: string, body: Node): HTMLDetailsElement {
  const d = el('details');
  d.dataset.key = key;
  d.open = openDetails.has(key);
  d.addEventListener('toggle', () => {
    if (d.open) openDetails.add(key);
    else openDetails.delete(key);
  });
  d.append(el('summary', null, summary), body);
  return d;
}

/** A table; the columns flagged in `numeric` are right-aligned. */
export function table(
  headers: readonly string[],
  rows: readonly (readonly Cell[])[],
  numeric: readonly boolean[] = [],
): HTMLTableElement {
  const t = el('table');
  const head = el('tr');
  headers.forEach((h, i) => {
    head.append(el('th', numeric[i] ? 'num' : null, h));
  });
  t.append(head);
  for (const row of rows) {
    const tr = el('tr');
    row.forEach((cell, i) => {
      const td = el('td', numeric[i] ? 'num' : null);
      fill(td, cell);
      tr.append(td);
    });
    t.append(tr);
  }
  return t;
}
