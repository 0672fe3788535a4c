import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { measureOverhead } from './harness-overhead.js';
const dir = mkdtempSync(join(tmpdir(), 'qb-'));
const r = await measureOverhead({ dir, steps: 5, warmupRuns: 1000, runs: 200, reps: 5, concurrency: 50 });
console.log(JSON.stringify({ pge: [r.harness.sequential.usPerCall, r.harness.concurrent.usPerCall], bare: [r.bare.sequential.usPerCall, r.bare.concurrent.usPerCall], ratio: r.pgeOverBare }));
