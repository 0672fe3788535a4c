import { CONFIG_FILE_NAME, DEMO_TASK } from './defaults.js';
import type { Command } from './flag-table.js';
import { termList, wrap } from './help-layout.js';

/**
 * The prose of the help: pge's own, and each command's usage, description, exit codes and
 * examples. The flag lists between them are commander's, generated from each command's declared
 * options (`program.ts`).
 */

const EXIT_CODES = termList(
  'Exit codes:',
  [
    ['0', 'every step passed'],
    [
      '1',
      'the run finished with failed steps, was stopped by a budget, or aborted (--on-exhausted abort); a work or evaluation answer that stays invalid after repairs fails its attempt, so it ends here',
    ],
    [
      '2',
      'usage or configuration error: unknown flag, bad value, bad config file, a --plan file that fails its checks, no API key, --max-cost for a model without a price, a log path that is taken or whose directory is missing, a working directory that cannot be created or written in (all detected before a model is called)',
    ],
    [
      '3',
      'the run could not complete: the model server failed or refused the request (network, 5xx, 401/403/404), a plan or contract answer stayed invalid after repairs, or the log could not be written while the run was going (a log that cannot be written stops the run)',
    ],
    [
      '130',
      'interrupted (Ctrl-C or SIGTERM): the run ends as "interrupted" and its log stays consistent; a second Ctrl-C quits at once',
    ],
  ],
  "With --nats the codes are the run's; in addition, no new event for --follow-timeout stops following with 3 (the run goes on), and Ctrl-C stops following with 130; both print the 'pge follow <runId>' command to follow the run again. A submission no coordinator answers (none runs, or a server of the cluster is lost) is sent again, under the same run id, for --submit-timeout, then exits 3.",
);

const RESUME_EXIT_CODES = termList("Exit codes (as 'pge run'):", [
  ['0', 'every step passed'],
  ['1', 'the run finished with failed steps, was stopped by a budget, or aborted (--on-exhausted abort)'],
  [
    '2',
    "usage or configuration error, or a log that cannot be resumed (detected before a model is called, and the log is left as it was): not a pge log, damaged beyond a torn last write, a run that has already ended, other models than the log's, or a log whose replay by this version of pge disagrees with it, or other tools, validators or workspace than its run had",
  ],
  [
    '3',
    'the run could not complete: the model server failed or refused the request, a plan or contract answer stayed invalid after repairs, or the log could not be written',
  ],
  ['130', 'interrupted (Ctrl-C or SIGTERM): the run ends as "interrupted" (it can be resumed no more)'],
]);

const CONTINUE_EXIT_CODES = termList('Exit codes:', [
  ['0', 'every step of the new run passed (kept steps count as passed)'],
  [
    '1',
    'the new run finished with failed steps, was stopped by a budget, or aborted (--on-exhausted abort); on NATS, also a run cancelled (pge cancel)',
  ],
  [
    '2',
    'usage or configuration error (unknown flag, bad value, a --plan file that fails its checks, no API key, NATS unreachable), or nothing to continue, said in one line before a model is called or anything is submitted: no such log, not a pge log, a run that did not end (its log has no closing event: resume it with pge resume <log>), a run that ended before it had a plan, a job whose every step passed (nothing left to do), a log whose replay by this version of pge disagrees with it; with --nats, a run id the events stream holds no event of, or a run that has not ended (still going, or its coordinator died)',
  ],
  [
    '3',
    'the new run could not complete: the model server failed or refused the request, a plan or contract answer stayed invalid after repairs, or the log could not be written; with --nats, a run that failed on such an error, no coordinator answering the submission within --submit-timeout, or no new event for --follow-timeout (following stops; the run goes on)',
  ],
  [
    '130',
    'interrupted (Ctrl-C or SIGTERM): the run ends as "interrupted" (with --nats, following stops and the run goes on)',
  ],
]);

const WORKER_EXIT_CODES = termList('Exit codes:', [
  ['0', 'drained and stopped after SIGINT or SIGTERM'],
  [
    '2',
    'usage or configuration error, NATS unreachable ("cannot connect to NATS at <url>: …"), or a credential that cannot serve the role ("this credential (…) is for the evaluator, not the generator: …")',
  ],
  [
    '3',
    'the server closed the connection for good (a revoked credential: "the server no longer accepts this credential …"), or an unexpected failure',
  ],
]);

const DASHBOARD_EXIT_CODES = termList('Exit codes:', [
  ['0', 'stopped by SIGINT or SIGTERM'],
  ['2', 'usage error: no source, unknown flag, bad value, a port that is taken, NATS unreachable'],
  ['3', 'an unexpected failure'],
]);

const FOLLOW_EXIT_CODES = termList(
  "Exit codes: the run's, as for 'pge run' (0 passed, 1 failed steps, budget or abort, 3 a model or transport error stopped it, 130 interrupted), once it has ended; and",
  [
    ['2', 'usage error, NATS unreachable, or no event of the run in the stream (a wrong id)'],
    [
      '3',
      'no new event of the run for --follow-timeout: following stops (the run does not), and the command to follow again is printed',
    ],
    ['130', 'interrupted (Ctrl-C or SIGTERM) while following: the run goes on'],
  ],
);

const NATS_CONFIG_EXIT_CODES = termList('Exit codes:', [
  ['0', 'the files were written'],
  ['2', 'usage error: unknown flag or bad value, or a directory that cannot be written'],
]);

const PLAN_EXIT_CODES = termList('Exit codes:', [
  ['0', 'the plan was printed (and written to --out)'],
  [
    '2',
    'usage or configuration error: no task, unknown flag, bad value, bad config file, no API key, an --out file that exists (without --force) or whose directory is missing (all detected before the planner is asked)',
  ],
  [
    '3',
    'the planner failed: the model server failed or refused the request, its answer stayed invalid after repairs, or it did not answer within --call-timeout',
  ],
]);

const REPLAY_EXIT_CODES = termList('Exit codes:', [
  ['0', 'the replay produced every recorded event again, in order, and nothing else'],
  ['1', 'it did not: the first difference is printed (and with --json, is in firstDifference)'],
  ['2', 'usage error, or a file that is not the log of an ended pge run'],
]);

const APPROVE_EXIT_CODES = termList('Exit codes:', [
  ['0', "done (pge approve: the run's coordinator recorded the decision)"],
  ['2', 'usage error, NATS unreachable, or (pge approve) a run that waits at no such gate'],
  ['3', 'no coordinator recorded the decision within 10s: none drives the run now; decide again later'],
]);

const CANCEL_EXIT_CODES = termList('Exit codes:', [
  ['0', 'the run was cancelled: its closing event is stored'],
  ['2', 'usage error, NATS unreachable, a run the deployment does not hold, or one that has ended'],
  ['3', 'no coordinator drives the run now (none answered within 5 s): cancel it again once one does'],
]);

const RUNS_EXIT_CODES = termList('Exit codes:', [
  ['0', 'the runs were listed (none, when none is in the stream or none matches)'],
  ['2', 'usage error (an unknown --status, a --since that is no duration or time), or NATS unreachable'],
  ['3', 'the events stream could not be read'],
]);

const GRAPH_EXIT_CODES = termList('Exit codes:', [
  ['0', 'the chart was printed'],
  ['2', 'usage error: unknown flag or bad value'],
]);

const CONFIGURATION = termList(
  'Configuration, highest precedence first:',
  [
    ['1.', 'flags'],
    [
      '2.',
      'environment: OPENAI_API_KEY (apiKey), OPENAI_BASE_URL (baseURL), PGE_MODEL (modelName), PGE_REPLICAS (replicas)',
    ],
    [
      '3.',
      `a config file: ./${CONFIG_FILE_NAME}, or --config <file>: a JSON object whose keys are option names in camelCase (maxSteps, maxRetriesPerStep, defaultThresholds, modelName, roleSettings, …); an unknown key is an error; relative paths in it are relative to the file`,
    ],
    ['4.', 'defaults'],
  ],
  "'pge config' shows the result and where each value came from.",
);

/** What the help of `pge` says before its commands. */
export const INTRO = wrap(
  'pge: a Planner-Generator-Evaluator harness. A planner turns a task into steps and a graded rubric; for each step a generator and an evaluator agree a contract, the generator does the work, the evaluator scores it against hard thresholds, and failed attempts are retried (refine or pivot). Every event is recorded in a markdown log.',
);

/** What the help of `pge` says after its commands and flags. */
export const AFTER_COMMANDS = `${wrap("Progress goes to stderr; stdout carries only the result, so 'pge run … > out.md' keeps the artifact.")}

${CONFIGURATION}

${EXIT_CODES}

Examples:
  pge demo
  export OPENAI_API_KEY=sk-…
  pge run "Write a short guide to intermittent fasting"
  pge run "Plan a 3-day trip to Lisbon" --model gpt-4.1-mini --max-retries 2 --threshold accuracy=8
  pge run "Draft a README for a CLI" --base-url http://localhost:11434/v1 --model llama3.1 \\
      --structured-output json_object
  pge batch tasks.txt --working-dir runs --max-cost 2
  pge resume pge_shared_state_<runId>.md
  pge config --model gpt-4.1-mini
  pge graph --machine step --format dot | dot -Tsvg > step.svg
  pge worker --role generator --nats nats://127.0.0.1:4222 --concurrency 8
  pge run "Write a haiku" --nats nats://127.0.0.1:4222
  pge follow <runId> --nats nats://127.0.0.1:4222
  pge nats-config --dir nats && nats-server -c nats/nats-server.conf
  pge dashboard pge_shared_state_<runId>.md`;

/** What the help says of each command. */
export interface CommandHelp {
  /** Its line in the list of `pge --help`. */
  summary: string;
  /** What follows `pge <command> ` in that list, when shorter than `usage`. */
  synopsis?: string;
  /** What follows `pge <command> ` in its own help. */
  usage: string;
  /** Its own help's text before the flags. */
  about: string;
  examples: string[];
}

/** What the help of each command says around its flags, in the order `pge --help` lists them. */
export const COMMAND_HELP: Record<Command, CommandHelp> = {
  run: {
    summary: 'run a task with an OpenAI-compatible model',
    synopsis: '"<task>" [flags]',
    usage: '"<task>" [flags]   |   pge run --plan <file> ["<task>"] [flags]',
    about: `Plans the task, runs every step through contract, work and evaluation, and prints the
result on stdout: the final artifact (or the transcript, with --output-type), then the summary
line with the path of the log; with an --output-type of dict, list, json or yaml the summary goes to
stderr, so that stdout parses. With --json it prints the result object instead.

With --plan <file> no planner is asked: the run follows the plan in the file (a plan document, as
'pge plan --out' writes it, or a pge log, whose latest plan it takes), checked as a planner's plan
is; a bad file is refused with the file and the field at fault. The task may then be left out when
the file has one, and the file's rubric stands unless --rubric is given.`,
    examples: [
      'pge run "Write a short guide to intermittent fasting"',
      'pge run "Summarise the causes of the 2008 crisis" --model gpt-4.1-mini --max-retries 2',
      'pge run "Write a haiku about rain" --threshold creativity=8 --fallback-threshold 7 --max-cost 0.50',
      'pge run "Explain TCP slow start" --evaluator-model gpt-4.1 --generator-model gpt-4.1-mini --json',
      'pge run "A README" --base-url http://localhost:8000/v1 --model qwen2.5 --structured-output prompt',
      'pge run --plan plan.json',
    ],
  },
  demo: {
    summary: 'run the whole loop offline with a built-in demo model (not an AI)',
    usage: '["<task>"] [flags]',
    about: `Runs the whole loop offline with a built-in demo model: scripted templates, not an AI. It
needs no API key and sends nothing anywhere. Its script shows a contract amendment, a failed
attempt, a refine and a pivot; every step passes in the end. It reads neither the environment
nor a config file, so it behaves the same everywhere.

Default task: "${DEMO_TASK}".`,
    examples: [
      'pge demo',
      'pge demo "Plan a birthday party" --working-dir /tmp/pge',
      'pge demo --json',
      'pge demo --inspect',
    ],
  },
  plan: {
    summary: 'ask the planner alone for a plan, a file to edit and pge run --plan',
    synopsis: '"<task>" [flags]',
    usage: '"<task>" [--out <file.json> [--force]] [--json] [flags]',
    about: `Asks the planner alone for a plan of the task, as a run's planning asks it (--max-steps,
a fixed --rubric, repairs of an invalid answer), and prints it: the scope, the numbered steps with
their ids and dependencies, and the rubric with the threshold of each criterion (the plan's, else
--threshold, else --fallback-threshold). No generator or evaluator is asked, no run is started and
no log is written. With --out it writes the plan document, versioned JSON that a person can edit
and 'pge run --plan' runs with no planner call; its JSON Schema ships with pge
(node_modules/pge/schemas/plan.schema.json, which the file's $schema names). An existing file is
not replaced unless --force is given. With --json it prints the document on stdout instead.

With --demo the built-in demo model plans (not an AI: no key, nothing sent anywhere).`,
    examples: [
      'pge plan "Write a short guide to intermittent fasting" --out plan.json',
      'pge plan "Plan a 3-day trip to Lisbon" --max-steps 4 --threshold accuracy=8 --json > plan.json',
      'pge plan --demo "Plan a birthday party" --out plan.json && pge demo --plan plan.json',
      'pge run --plan plan.json',
    ],
  },
  resume: {
    summary:
      'continue a run whose process died, from its log, in the same file (--nats <url> <runId>: have a deployment take a run over now)',
    synopsis: '<log> [flags]',
    usage: '<log-file> [flags]   |   pge resume --nats <url> <runId>',
    about: `Continues a run whose process died (killed, a power loss) from its markdown log, in the same
file. The run is rebuilt from the log's events without asking any model again for an answer the log
holds; only a call in flight at the crash is asked again. A "RUN RESUMED" section marks where it
went on, then the run goes on as 'pge run' would, and the result is printed as 'pge run' prints it.
The run keeps the settings its log recorded (steps, retries, thresholds, budgets), so those flags are
not taken. Its models are the log's unless a flag, the environment or a config file names one
(another name than the log's is refused); the API key and endpoint come from the usual places.
Give it the run's --validate, --no-tools and MCP flags again: the log records the validators and
whether the tools were on, and other ones are refused. The run's working directory, where its
workspace is, comes from the log unless --working-dir is given. A run of 'pge demo' resumes with
the demo model and, unless --validate is given, the demo's validator. The calls before the crash
count in the run's usage and against its budgets; the time the process was dead does not count
against --max-duration. The end of a write the crash cut short is removed first. Resume a run only
once its process has died: two processes must never write one log.

With --nats, asks a distributed deployment to take run <runId> over now: a coordinator rebuilds it
from its events in the stream and drives it on, unless a live coordinator still drives it (that one
is named); then the run is followed to its end as 'pge follow' does. Coordinators take over the runs
of a dead one on their own within seconds; this is for a run nobody took over (every coordinator
was down, or its lease was lost).`,
    examples: [
      'pge resume pge_shared_state_<runId>.md',
      'pge resume --nats nats://127.0.0.1:4222 pge-20261123-101500-1a2b3c4d',
      'pge resume runs/pge_shared_state_<runId>.md --base-url http://localhost:11434/v1 --json',
    ],
  },
  batch: {
    summary: 'run one task per line of a file, each with its own log',
    usage: '<file> [flags]',
    about: `Runs one task per non-empty line of <file> (lines starting with # are comments), one after
another, each with its own run id and log (with --log, the run id is added to the file name).
Prints one summary line per task on stdout (with --json, an array of results). After a model
server error (exit 3 other than an invalid answer) the remaining tasks are skipped, since they
would fail the same way. The exit code is the worst of the tasks'.`,
    examples: [
      'pge batch tasks.txt',
      'pge batch tasks.txt --working-dir runs --max-cost 1 --json > results.json',
    ],
  },
  config: {
    summary: 'show the resolved configuration and where each value came from',
    usage: '[flags]',
    about: `Prints every option with its resolved value and where it came from: flag, env, config file
or default. The API key is never printed: it shows as (set) or (not set). Takes the flags of
'pge run', so you can check what a command line would do. With --json it prints the same as JSON.`,
    examples: [
      'pge config',
      'pge config --model gpt-4.1-mini --max-steps 5',
      'PGE_MODEL=gpt-4.1-mini pge config --config team.json',
    ],
  },
  graph: {
    summary: 'print the session, run or step statechart as Mermaid, DOT or JSON',
    usage: '[flags]',
    about: `Prints a statechart of the harness, read from the machine definitions themselves, so it is
the chart the code runs: the session around a run (replay, calls and gates waiting with their
deadlines, takeover), the run (planning, the steps in turn, replans, budget stops, interrupt)
or one step (contract negotiation, work, evaluation, refine and pivot retries). Edges are labelled
with their event ("always" for eventless ones, "done: <actor>" when an invoked call actor answers,
"error: <actor>" when it fails) and their guard in brackets. Mermaid output renders wherever
Mermaid does (GitHub markdown, the Mermaid live editor); DOT is for Graphviz; JSON lists the states
and transitions as nodes and edges. Calls no model and reads no configuration.`,
    examples: [
      'pge graph',
      'pge graph --machine session',
      'pge graph --machine step --format dot | dot -Tsvg > step.svg',
      'pge graph --machine run --format json > run.json',
    ],
  },
  replay: {
    summary:
      "re-run a recorded run's charts from its log, with no model call, and check that they produce the recorded events",
    usage: '<log> [--json]',
    about: `Runs the charts of an ended run again with every model call answered from its log (no
model is called: the replay has no workers, and counts the requests that would have gone to one),
and checks that they produce the recorded events, one by one, and nothing else. A log replays
identically unless the charts changed since it was written: use recorded runs as regression
fixtures. Prints the verdict, or the first event where the replay and the log part; --json prints
{"runId", "identical", "events", "modelCalls", "firstDifference": {"seq", "problem"} | null}.

A run interrupted by a person replays through its interruption: the replay interrupts it again
where the log says, with the reason its closing event records.`,
    examples: [
      'pge replay pge_shared_state_<runId>.md',
      'pge replay pge_shared_state_<runId>.md --json | jq .identical',
    ],
  },
  fork: {
    summary:
      'a new run that reuses a recorded run up to step N and calls models from there (other models, retries, budgets: any run flag)',
    synopsis: '<log|runId> --from-step N',
    usage: '<log|runId> --from-step <n> [--log <new-log>] [--nats <url>] [flags]',
    about: `Starts a new run (its own id and log) from a recorded one: the parent's plan and every event
before step <n> started are taken from its log and replayed, so no model is asked again for any
of them, and models are called from step <n> on. The new log's first section names its parent.
The fork's models are the flags', the environment's or the config file's, else the parent's; the
bounds, thresholds, budgets and call deadline given as flags replace the parent's, which stand
for the rest. A flag that would change what happened before step <n> is refused with the first
difference, before any model is called. The fork's workspace starts as a copy of the parent's,
as the parent left it (files of later steps included, if it got that far).

With --nats the fork is of an ended run of a deployment, by its id: a coordinator reads the
parent's events from the events stream (a run unknown, not ended, or that never started step <n>
is refused, exit 2), records the fork's first events and drives it on; its models are the
workers', its log the persistence worker's, and only the settings above may be given. It is
followed as pge run --nats follows a run (--creds client.creds suffices). See docs/distributed.md.`,
    examples: [
      'pge fork pge_shared_state_<runId>.md --from-step 2 --generator-model gpt-4.1',
      'pge fork pge_shared_state_<runId>.md --from-step 3 --max-retries 5 --log retry-more.md',
      'pge fork --nats nats://127.0.0.1:4222 --creds client.creds <runId> --from-step 2 --max-retries 3',
    ],
  },
  continue: {
    summary:
      "carry a job on: a new run of an ended run's plan that keeps the steps that passed and runs the rest",
    synopsis: '<log> [--plan <edited.json>]',
    usage: '<log> [--plan <edited.json>] [--log <new-log>] [flags]',
    about: `Starts a new run (its own id and log) of the plan of the ended run that <log> records, or of
--plan's edited copy of it, with no planner call. A step that passed is kept: it is not run, its
artifact goes to the steps that depend on it, and the new run's workspace starts as a copy of the
earlier one's. A step that failed or was exhausted runs again, and so does every step that depends
on a step that runs. With --plan, a step the file adds runs, one it drops is gone, and one whose
title, description, expected output or dependencies it changes runs again; a rubric other than the
one the steps were judged by runs every step again. The new run is the next run of the earlier
run's job (the first run's id), and its log names the run it continues. Its models are the flags',
the environment's or the config file's, else the earlier run's; its other settings are the flags'.
A run that has not ended is resumed (pge resume), not continued; a job whose every step passed
has nothing left to do (exit 2) unless --plan adds or changes steps. See docs/long-jobs.md.`,
    examples: [
      'pge continue pge_shared_state_<runId>.md',
      'pge continue pge_shared_state_<runId>.md --plan edited.json --max-retries 5',
    ],
  },
  runs: {
    summary: 'list the runs, embedded or of a deployment: status, steps, cost, last event',
    synopsis: '[--nats <url> | --working-dir <dir>]',
    usage: '[--nats <url> | --working-dir <dir>] [--status <s>,…] [--since <when>] [flags]',
    about: `Lists the runs of a distributed deployment, read from the events stream (--nats, or NATS_URL), or
else the embedded runs whose logs are in --working-dir (default: the current directory), oldest start first
(the newest last, nearest the prompt): each run's id, its job and run number when it continues
another (pge continue; --job <id> lists one job's runs), status, steps passed of the plan's, what its
model calls cost, when it started and its latest event (time and type, UTC), and its task's first
line. A run is running, waiting (at a gate: see pge approvals), or ended: passed (every step),
completed (not every step passed), or stopped: aborted, stopped (a budget), failed (an error),
interrupted, or the reason it stopped for. A run whose coordinator died shows as running until
another takes it over (an embedded run whose process died: until pge resume). Runs the stream no
longer holds (its limits) are not listed.`,
    examples: [
      'pge runs',
      'pge runs --nats nats://127.0.0.1:4222',
      'pge runs --status running,waiting --since 1h',
      'pge runs --job pge-20260301-101500-3f2a9c1e',
      "NATS_CREDS=client.creds pge runs --since 2026-11-28T00:00:00Z --json | jq '.[].runId'",
    ],
  },
  approvals: {
    summary: 'list the gates runs wait at (--approve), embedded or of a deployment',
    synopsis: '[--nats <url> | --working-dir <dir>]',
    usage: '[--nats <url> | --working-dir <dir>] [--json]',
    about: `Lists the gates runs wait at (runs started with --approve, or approve in a submission): each
run's id, the gate, the step and attempt, since when, and what is to be approved. Read from the
events stream of a deployment (--nats, or NATS_URL): a run whose coordinator restarted is listed
still; else from the logs of the embedded runs in --working-dir (default: the current directory).`,
    examples: ['pge approvals --nats nats://127.0.0.1:4222', 'NATS_CREDS=client.creds pge approvals --json'],
  },
  approve: {
    summary: 'approve, or --reject "<reason>", the gate a run waits at',
    synopsis: '<runId> [flags]',
    usage: '<runId> [--gate plan|contract|step] [--reject "<reason>"] [--nats <url>]',
    about: `Decides the gate a run of a distributed deployment waits at: approves it, or with --reject
sends the plan back to the planner, the contract back to negotiation or the result back to the
generator, with the reason. The decision goes to the run's coordinator on its control subject;
the command waits until the coordinator has recorded it (approval.decided) and prints it.`,
    examples: [
      'pge approve pge-20260301-101500-3f2a9c1e --nats nats://127.0.0.1:4222',
      'pge approve pge-20260301-101500-3f2a9c1e --gate plan --reject "add a step on safety"',
    ],
  },
  cancel: {
    summary: 'cancel a run of a deployment: it stops, its calls cancelled',
    synopsis: '<runId> [flags]',
    usage: '<runId> [--reason "<text>"] [--by <name>] [--nats <url>] [--json]',
    about: `Cancels a run of a distributed deployment: the coordinator that drives it stops every step
running (their model calls cancelled) and ends the run with run.failed, reason "cancelled", naming
who asked (--by, default your user name) and why (--reason). A run that has ended is refused. The
command waits until the closing event is stored and prints it. Only the client credential may
cancel (docs/security.md).`,
    examples: [
      'pge cancel pge-20260301-101500-3f2a9c1e --nats nats://127.0.0.1:4222',
      'NATS_CREDS=client.creds pge cancel pge-20260301-101500-3f2a9c1e --reason "wrong task"',
    ],
  },
  worker: {
    summary: 'one process of a distributed deployment on NATS',
    synopsis: '--role <role>',
    usage: '--role planner|generator|evaluator|persistence|coordinator [flags]',
    about: `Starts one process of a distributed deployment on NATS (JetStream). Role workers take their
role's work from a shared durable queue, so a role scales by starting more of them; the
persistence worker writes every run's log (to --working-dir) from a durable consumer; a
coordinator takes runs submitted on pge.runs.submit ('pge run --nats', or any NATS client) and
drives their statecharts. Streams and consumers are created by the processes themselves.

Model flags, the environment and pge.config.json configure role workers as they configure
'pge run'; harness flags set a coordinator's defaults. NATS connection settings come from NATS_URL,
NATS_USER/NATS_PASSWORD, NATS_TOKEN, NATS_NKEY_SEED_FILE, NATS_CREDS and NATS_CA/NATS_CERT/NATS_KEY.

SIGINT or SIGTERM drains: work in flight finishes (a second signal hands it back to the queue
for another worker), then the connection closes.`,
    examples: [
      'pge worker --role coordinator --nats nats://127.0.0.1:4222',
      'pge worker --role persistence --working-dir /var/lib/pge/logs',
      'OPENAI_API_KEY=sk-… pge worker --role generator --concurrency 8 --model gpt-4.1',
      'pge worker --role evaluator --demo',
    ],
  },
  dashboard: {
    summary: 'a local web page that shows runs live, from a log or NATS',
    synopsis: '[flags]',
    usage: '[<log>...] [--nats <url>] [--port <n>] [--host <addr>] [--control] [flags]',
    about: `Serves a read-only web page that shows runs as they go, and after: the run and step
statecharts with the active state highlighted, the plan, each attempt's score per criterion
against its threshold, the contract rounds, the refine and pivot decisions, tokens, cost and time
per phase and per step, and every event. Above them, every run at a glance: status, task, steps
passed of total, cost, start and duration, the runs waiting for a person first, filtered by
status if you like. Given a log file (pge dashboard <log>, or --log <log>) it follows it while its run writes it; with --nats it
follows every run on the server from the JetStream stream (every run stored when the dashboard
joined is read from its start; a reconnect loses nothing); given neither, every log in
--working-dir (default: the current directory), those that runs create later too.

The page loads nothing from the internet (no CDN, no fonts), shows model text as text, and takes
only GET requests. It binds 127.0.0.1 unless --host says otherwise: the runs' tasks and model
output are visible to anyone who can reach the port. It runs until Ctrl-C.

With --control the page also approves or rejects the gate a run waits at, cancels runs, starts
runs from a form and forks ended runs from a step (with --nats, by the deployment), each in the name of --operator
(default: the OS user), which the run's log records. The URL it prints carries a token, new at each start, that
every action must send; requests from another origin are refused. Without --nats the runs it
starts run in this process (--demo: the built-in demo model; else --model and the environment, as
for pge run): with --control, NATS_URL is not read, so give --nats to act on a deployment; with
--nats it acts with the client credential (--creds client.creds).`,
    examples: [
      'pge dashboard pge_shared_state_<runId>.md',
      'pge dashboard --nats nats://127.0.0.1:4222 --port 8080',
      'pge dashboard --log a.md --log b.md --port 0',
      'pge dashboard --control --demo',
      'pge dashboard --control --nats nats://127.0.0.1:4222 --creds client.creds --operator ada',
    ],
  },
  follow: {
    summary: 'show a run of a NATS deployment, from its start, to its end',
    synopsis: '<runId> [flags]',
    usage: '<runId> [--nats <url>] [--from-seq <n>] [flags]',
    about: `Shows a run of a distributed deployment as 'pge run --nats' shows it: its progress lines
from its first event (or from --from-seq), read from the JetStream stream, so a run that ended
long ago shows the same lines as one still going, and a reconnect or a server restart loses
nothing. When the run ends it prints it as 'pge run' does, its result rebuilt from its events: the
final artifact and the summary (with --json, the result object) on stdout, and it exits with the
run's exit code. With no new event for --follow-timeout it stops following and
exits 3; the run is not touched. 'pge run --nats' prints this command when it stops following.`,
    examples: [
      'pge follow pge-20260301-101500-3f2a9c1e --nats nats://127.0.0.1:4222',
      'NATS_URL=nats://nats:4222 pge follow pge-20260301-101500-3f2a9c1e --from-seq 40 --verbose',
      'pge follow pge-20260301-101500-3f2a9c1e --json > result.json',
    ],
  },
  'nats-config': {
    summary: 'write a nats-server config and one credential per role',
    synopsis: '--dir <dir>',
    usage: '--dir <dir> [--port <n>] [--host <addr>] [--store-dir <dir>] [--rotate]',
    about: `Writes what a secured deployment needs: <dir>/nats-server.conf (JetStream on, operator mode
with its accounts preloaded) and one credential per role, <dir>/<role>.creds, for coordinator,
planner, generator, evaluator, persistence, client (submits runs, follows them, sends control) and
observer (reads events: the dashboard). Each credential is a user JWT whose permissions allow only
what its role does; a connection without one is refused. Give each process its role's file with
--creds or NATS_CREDS. The config holds no secret; the .creds files and keys/ are readable by
their owner only. Run again, it keeps the keys and the credentials it issued before; with
--rotate it issues new ones and revokes the old ones once the server reloads its config
(nats-server --signal reload). See docs/security.md.`,
    examples: [
      'pge nats-config --dir ./nats && nats-server -c ./nats/nats-server.conf',
      'pge worker --role generator --creds ./nats/generator.creds --nats nats://127.0.0.1:4222',
      'NATS_CREDS=./nats/client.creds pge run "Write a haiku" --nats nats://127.0.0.1:4222',
      'pge nats-config --dir ./nats --rotate && nats-server --signal reload',
    ],
  },
};

const EXITS: Record<Command, string> = {
  run: EXIT_CODES,
  demo: EXIT_CODES,
  plan: PLAN_EXIT_CODES,
  resume: RESUME_EXIT_CODES,
  batch: EXIT_CODES,
  config: EXIT_CODES,
  worker: WORKER_EXIT_CODES,
  dashboard: DASHBOARD_EXIT_CODES,
  graph: GRAPH_EXIT_CODES,
  replay: REPLAY_EXIT_CODES,
  fork: RESUME_EXIT_CODES,
  continue: CONTINUE_EXIT_CODES,
  runs: RUNS_EXIT_CODES,
  approvals: APPROVE_EXIT_CODES,
  approve: APPROVE_EXIT_CODES,
  cancel: CANCEL_EXIT_CODES,
  follow: FOLLOW_EXIT_CODES,
  'nats-config': NATS_CONFIG_EXIT_CODES,
};

/** What the help of a command says after its flags: configuration, exit codes and examples. */
export function afterFlags(command: Command): string {
  // Only the commands that read the environment and a config file explain them.
  const configuration = [
    'run',
    'plan',
    'resume',
    'fork',
    'continue',
    'batch',
    'config',
    'worker',
    'follow',
  ].includes(command)
    ? `${CONFIGURATION}\n\n`
    : '';
  const examples = COMMAND_HELP[command].examples.map((e) => `  ${e}`).join('\n');
  return `${configuration}${EXITS[command]}\n\nExamples:\n${examples}`;
}

/** The line that follows a usage error. */
export function helpHint(command: Command | null): string {
  return `Run 'pge ${command ? `${command} ` : ''}--help' for usage.`;
}
