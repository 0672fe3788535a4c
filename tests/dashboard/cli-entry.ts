import { main } from '../../src/cli/main.js';

/** `pge` from source, for tests that spawn the CLI without building it: `node --import tsx cli-entry.ts …`. */
process.exitCode = await main(process.argv.slice(2));
