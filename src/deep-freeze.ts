/**
 * Freezes `value` and everything under it, and returns it; stops at what is already frozen (so
 * a message that holds a part handed over before is not walked again). Every message on the bus
 * goes through it, so it walks with index and key loops rather than allocate an array of values
 * per object.
 */
export function deepFreeze<T>(value: T): T {
  if (value === null || typeof value !== 'object' || Object.isFrozen(value)) return value;
  Object.freeze(value);
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) deepFreeze(value[i]);
  } else {
    for (const key in value) deepFreeze((value as Record<string, unknown>)[key]);
  }
  return value;
}
