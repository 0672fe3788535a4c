import { inputOf } from '../../src/roles/prompts.js';
import type { FakeOpenAI } from './fake-openai-server.js';

/** What the `pge continue` tests share: a three-step plan document, and the steps a model server was asked about. */

/** s1 and s2 depend on nothing, s3 on s2: a failed s2 runs again with s3, and s1 is kept. */
export const THREE_PART_PLAN = {
  version: 1,
  task: 'Write a three-part guide',
  steps: [
    { id: 's1', title: 'Part one', description: 'write part one', expectedOutput: 'part one' },
    { id: 's2', title: 'Part two', description: 'write part two', expectedOutput: 'part two' },
    {
      id: 's3',
      title: 'Part three',
      description: 'extend two',
      expectedOutput: 'part three',
      dependsOn: ['s2'],
    },
  ],
  criteria: [
    { name: 'accuracy', weight: 'high', threshold: 7 },
    { name: 'clarity', threshold: 7 },
  ],
};

/** The step numbers `server` was asked about since its request `from`, each once, in the order first asked. */
export const stepsAskedSince = (server: FakeOpenAI, from: number) => [
  ...new Set(
    server
      .completions()
      .slice(from)
      .map((r) => (inputOf((r.body as { messages: never }).messages) as { stepNumber?: number }).stepNumber),
  ),
];
