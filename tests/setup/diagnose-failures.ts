import { beforeEach } from 'vitest';
import { anyWatched, outputReport } from '../support/diagnostics.js';

/**
 * For each failed test of a file that started processes, prints their stamped output: a timeout
 * in a multi-process test then shows which process went quiet, and when.
 */
beforeEach(({ onTestFailed }) => {
  onTestFailed(() => {
    if (anyWatched()) console.error(outputReport());
  });
});
