/** pge: a Planner–Generator–Evaluator harness. The library entry point. */

export type { PgeOptions, ResolvedOptions, RoleModelSettings } from './api/options.js';
export type { OutputType, RunOutput, TranscriptMessage } from './api/output.js';
export { PlannerGeneratorEvaluator } from './api/planner-generator-evaluator.js';
export type { AttemptLog, HarnessResult, PhaseUsage, SelfEvaluationBias, StepLog } from './api/result.js';
export type { Bus, BusHandler, BusMessage, BusSubscription } from './bus/bus.js';
export { InProcessBus } from './bus/in-process-bus.js';
export { subjects } from './bus/subjects.js';
export { createCoordinator } from './conductor/coordinator.js';
export {
  BusError,
  ConfigurationError,
  InvalidOutputError,
  LogWriteError,
  MessageRejectedError,
  ModelRequestError,
  ModelTransportError,
  PgeError,
  ResumeError,
  UnansweredRequestError,
} from './errors.js';
export { runMachine } from './machines/run-machine.js';
export { sessionMachine } from './machines/session-machine.js';
export { stepMachine } from './machines/step-machine.js';
// From the reader itself, not the persistence barrel: the writer's declarations name Node's `Buffer`,
// and the published types must compile without Node's types (tests/package/published-types.test.ts).
export { readLog, readLogFile } from './persistence/log-reader.js';
export { createPersistenceActor } from './persistence/persistence-actor.js';
export { DemoModel } from './roles/demo-model.js';
export type { ChatMessage, Model, ModelAnswer, ModelRequest } from './roles/model.js';
export { OpenAIModel } from './roles/openai-model.js';
export { createRoleWorker } from './roles/role-worker.js';
export { newRunId } from './runtime/run-id.js';
export type { GivenPlan, PlanDocumentInput, RunEvent, RunEventType } from './schemas/index.js';
// A plan as a file (`plan()`, the `plan` option): its schema, version and JSON Schema's place.
export { PLAN_DOCUMENT_SCHEMA_REF, PLAN_DOCUMENT_VERSION, PlanDocument } from './schemas/index.js';
export type {
  Validator,
  ValidatorContext,
  ValidatorFunction,
  ValidatorVerdict,
} from './tools/validators.js';
