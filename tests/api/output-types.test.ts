import { describe, expectTypeOf, it } from 'vitest';
import type { PgeOptions } from '../../src/api/options.js';
import type { OutputType, RunOutput, TranscriptMessage } from '../../src/api/output.js';
import { PlannerGeneratorEvaluator } from '../../src/api/planner-generator-evaluator.js';

/**
 * `run` is typed by the `outputType` the options give. These are type assertions: `npm run
 * typecheck` fails when one does not hold (at run time `expectTypeOf` does nothing), so the
 * instances are built in functions that are never called.
 */

const instances = () => ({
  dict: new PlannerGeneratorEvaluator({ outputType: 'dict' }),
  list: new PlannerGeneratorEvaluator({ outputType: 'list', maxSteps: 3 }),
  str: new PlannerGeneratorEvaluator({ outputType: 'str' }),
  final: new PlannerGeneratorEvaluator({ modelName: 'gpt-4.1', outputType: 'final' }),
  json: new PlannerGeneratorEvaluator({ outputType: 'json' }),
  yaml: new PlannerGeneratorEvaluator({ outputType: 'yaml' }),
  unset: new PlannerGeneratorEvaluator({ maxSteps: 3 }),
  dynamic: new PlannerGeneratorEvaluator({} as PgeOptions),
});
type Instances = ReturnType<typeof instances>;
type RunOf<K extends keyof Instances> = Awaited<ReturnType<Instances[K]['run']>>;

describe('run() is typed by outputType', () => {
  it("returns a string for 'final', 'str', 'json' and 'yaml'", () => {
    expectTypeOf<RunOf<'final'>>().toEqualTypeOf<string>();
    expectTypeOf<RunOf<'str'>>().toEqualTypeOf<string>();
    expectTypeOf<RunOf<'json'>>().toEqualTypeOf<string>();
    expectTypeOf<RunOf<'yaml'>>().toEqualTypeOf<string>();
  });

  it("returns the transcript's messages for 'dict' and its lines for 'list'", () => {
    expectTypeOf<RunOf<'dict'>>().toEqualTypeOf<TranscriptMessage[]>();
    expectTypeOf<RunOf<'list'>>().toEqualTypeOf<string[]>();
    expectTypeOf<Awaited<ReturnType<Instances['list']['batchedRun']>>>().toEqualTypeOf<string[][]>();
  });

  it('returns any output when the type is not known where the instance is made', () => {
    expectTypeOf<RunOf<'unset'>>().toEqualTypeOf<RunOutput>();
    expectTypeOf<RunOf<'dynamic'>>().toEqualTypeOf<TranscriptMessage[] | string[] | string>();
    expectTypeOf<Instances['final']>().toExtend<PlannerGeneratorEvaluator>();
  });

  it('refuses an output type that does not exist', () => {
    // @ts-expect-error: 'basemodel' is not an output type.
    const make = () => new PlannerGeneratorEvaluator({ outputType: 'basemodel' });
    expectTypeOf<'basemodel'>().not.toExtend<OutputType>();
    expectTypeOf(make).toBeFunction();
  });
});
