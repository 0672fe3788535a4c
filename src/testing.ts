/**
 * pge's test doubles, published as `pge/testing` so that a test suite can drive the harness with no
 * model server while the library's main entry exports only what a run in production uses.
 */

export type { Script, ScriptedAnswer } from './roles/scripted-model.js';
export { ScriptedModel } from './roles/scripted-model.js';
