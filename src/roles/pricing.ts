import type { ModelPrice, PriceTable } from '../schemas/settings.js';

/**
 * What model calls cost. Prices are USD per million tokens, standard tier, without the discount
 * for cached input tokens (so a cost is an upper bound when the server caches a prompt prefix).
 * The shape of a price (`ModelPrice`, `PriceTable`) is a setting, declared in `src/schemas`.
 */

/**
 * OpenAI's published list prices, as of August 2025 (openai.com/api/pricing, standard tier). Prices
 * change: pass your own table (`prices` of `OpenAIModel`) rather than edit this one. `o3` is the
 * price after its June 2025 cut.
 */
export const DEFAULT_PRICES: Readonly<PriceTable> = Object.freeze({
  'gpt-5': { inputPerMTok: 1.25, outputPerMTok: 10 },
  'gpt-5-mini': { inputPerMTok: 0.25, outputPerMTok: 2 },
  'gpt-5-nano': { inputPerMTok: 0.05, outputPerMTok: 0.4 },
  'gpt-4.1': { inputPerMTok: 2, outputPerMTok: 8 },
  'gpt-4.1-mini': { inputPerMTok: 0.4, outputPerMTok: 1.6 },
  'gpt-4.1-nano': { inputPerMTok: 0.1, outputPerMTok: 0.4 },
  'gpt-4o': { inputPerMTok: 2.5, outputPerMTok: 10 },
  'gpt-4o-mini': { inputPerMTok: 0.15, outputPerMTok: 0.6 },
  o3: { inputPerMTok: 2, outputPerMTok: 8 },
  'o3-mini': { inputPerMTok: 1.1, outputPerMTok: 4.4 },
  'o4-mini': { inputPerMTok: 1.1, outputPerMTok: 4.4 },
});

// Snapshot suffixes: `-2024-08-06` (current style) and `-0613` (older style). Anything else after a
// known name is a different model (`gpt-4o-audio-preview`, `o3-pro`) whose price is not the base's.
const SNAPSHOT_SUFFIX = /^-(\d{4}-\d{2}-\d{2}|\d{4})$/;

/**
 * The price of a model: the exact name, else the longest table name of which `model` is a dated
 * snapshot. Case-insensitive; `undefined` when the table does not know the model.
 */
export function priceOf(model: string, table: Readonly<PriceTable> = DEFAULT_PRICES): ModelPrice | undefined {
  const name = model.trim().toLowerCase();
  let best: { key: string; price: ModelPrice } | undefined;
  for (const [key, price] of Object.entries(table)) {
    const k = key.toLowerCase();
    if (k === name) return price;
    if (
      name.startsWith(k) &&
      SNAPSHOT_SUFFIX.test(name.slice(k.length)) &&
      k.length > (best?.key.length ?? -1)
    ) {
      best = { key: k, price };
    }
  }
  return best?.price;
}

/** The cost of one call, and whether it is known: an unknown model costs 0 with `priced: false`. */
export interface CallCost {
  costUsd: number;
  priced: boolean;
}

/** The USD cost of a call with the given token counts; 0 and `priced: false` for an unknown model. */
export function costOf(
  model: string,
  promptTokens: number,
  completionTokens: number,
  table: Readonly<PriceTable> = DEFAULT_PRICES,
): CallCost {
  const price = priceOf(model, table);
  if (!price) return { costUsd: 0, priced: false };
  return {
    costUsd: (promptTokens * price.inputPerMTok + completionTokens * price.outputPerMTok) / 1_000_000,
    priced: true,
  };
}
