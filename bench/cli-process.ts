import { main } from '../src/cli/main.js';

/**
 * `pge` from the sources, for the sections that need a real process to kill: started as
 * `node --import tsx bench/cli-process.ts <args>`, so that the bench needs no build.
 */
process.exitCode = await main(process.argv.slice(2));
