import type { ConfigKey } from './flag-table.js';

/**
 * A command line as the commands of the flag table read it, after `flags.ts` parsed it: types only,
 * so that the modules that read one (`config.ts`, `nats-options.ts`, the commands) do not depend on
 * the parser, which depends on the whole program.
 */

/** What the flags of one command line say. */
export interface ParsedFlags {
  /** Option values set by flags, already converted. */
  options: Partial<Record<ConfigKey, unknown>>;
  /** The value of every flag given, by flag name, converted. */
  values: Readonly<Record<string, unknown>>;
  json: boolean;
  configPath: string | null;
  /** `--nats <url>`: run through a distributed deployment (or, for `pge worker`, its server). */
  nats: string | null;
}

/** A parsed command line. */
export interface CommandLine {
  help: boolean;
  positionals: string[];
  flags: ParsedFlags;
}
