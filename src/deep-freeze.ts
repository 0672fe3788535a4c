/**
 * Freezes `value` and everything under it, and returns it; stops at what is already frozen (so
 * a message that holds a part handed over before is not walked again).
 */
export function deepFreeze<T>(value: T): T {
  if (value === null || typeof value !== 'object' || Object.isFrozen(value)) return value;
  Object.freeze(value);
  for (const child of Object.values(value)) deepFreeze(child);
  return value;
}
