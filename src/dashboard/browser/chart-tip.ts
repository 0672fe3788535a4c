import { byId } from './dom.js';

/**
 * The tooltip of the statecharts' arrows: pointing at an arrow shows its transitions (the event,
 * then the guard in brackets) and the two states it joins, next to the pointer. An arrow carries
 * the same text as its accessible name, for a screen reader.
 */

/** The tooltip's offset from the pointer, so that it does not hide the arrow pointed at. */
const OFFSET = 14;

/** Where an arrow's tooltip text is kept on the arrow: its lines, joined by newlines. */
export const TIP_ATTRIBUTE = 'data-tip';

function place(tip: HTMLElement, event: PointerEvent): void {
  // Kept inside the window: left of the pointer near the right edge, above it near the bottom.
  const x =
    event.clientX + OFFSET + tip.offsetWidth > innerWidth
      ? event.clientX - OFFSET - tip.offsetWidth
      : event.clientX + OFFSET;
  const y =
    event.clientY + OFFSET + tip.offsetHeight > innerHeight
      ? event.clientY - OFFSET - tip.offsetHeight
      : event.clientY + OFFSET;
  // CSSOM, not a style attribute: the page's Content-Security-Policy allows the one, not the other.
  tip.style.left = `${Math.max(0, x)}px`;
  tip.style.top = `${Math.max(0, y)}px`;
}

/** The arrow under the pointer of `event`, if it is over one. */
const arrowOf = (event: Event): Element | null =>
  event.target instanceof Element ? event.target.closest(`[${TIP_ATTRIBUTE}]`) : null;

/** Shows the tooltip of the arrow the pointer is over in `chart`, and marks that arrow `pointed`. */
export function followPointer(chart: SVGSVGElement): void {
  const tip = byId('chart-tip');
  let pointed: Element | null = null;
  const hide = () => {
    pointed?.classList.remove('pointed');
    pointed = null;
    tip.hidden = true;
  };
  chart.addEventListener('pointerover', (event) => {
    const arrow = arrowOf(event);
    if (arrow === pointed) return;
    hide();
    if (!arrow) return;
    pointed = arrow;
    arrow.classList.add('pointed');
    tip.textContent = arrow.getAttribute(TIP_ATTRIBUTE);
    tip.hidden = false;
    place(tip, event);
  });
  chart.addEventListener('pointermove', (event) => {
    if (pointed) place(tip, event);
  });
  chart.addEventListener('pointerleave', hide);
  // A chart is drawn again on every update: a tooltip of the one replaced would stay up.
  hide();
}
