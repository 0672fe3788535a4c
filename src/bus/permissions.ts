import type { Role } from '../schemas/index.js';
import { ROLES } from '../schemas/setting-values.js';
import { EVENTS_STREAM, PERSISTENCE_CONSUMER, PGE_STREAMS, WORK_STREAM } from './nats-streams.js';
import { PULL_EXPIRES_MS } from './nats-subscriptions.js';
import { LEASE_BUCKET } from './run-leases.js';
import {
  CANCEL_ANSWER_MS,
  RESUME_ANSWER_MS,
  SUBMIT_ANSWER_MS,
  subjectMatches,
  subjects,
  workerQueue,
} from './subjects.js';

/**
 * What each process of a deployment may publish and subscribe to on NATS: the one source of the
 * permissions `pge nats-config` writes into credentials, and that docs/security.md lists. Every
 * list is an allow list (everything else is refused by the server); a deny entry takes precedence
 * over an allow.
 *
 * Besides pge's own subjects, each process needs the JetStream API subjects of what it does with
 * streams: `$JS.API.INFO` and stream info (every process checks the streams at start), lookups
 * on the streams it reads, and info, next and acknowledgements (`$JS.ACK.<stream>.<consumer>.>`)
 * of the durable consumer it takes messages from. Only a coordinator creates and updates streams,
 * consumers and the run-lease bucket, publishes events and work, and answers abandoned work.
 *
 * No other role may make a consumer, of any name or kind: a consumer's configuration says where
 * the server delivers its messages (`deliver_subject`), and the server delivers them in the
 * account that holds the streams, as itself, where no permission of the creator's applies: onto
 * other consumers' pulls (`$JS.API.CONSUMER.MSG.NEXT.…`: a planner's work item goes to nobody),
 * the coordinator's subjects, anyone's rejection reports. So the coordinator makes every durable consumer
 * at start (`pgeConsumers`), and readers read by lookups from a stream's leader (nats-stored.ts).
 */

/** The processes a deployment has, each with its own credential. */
export const NATS_ROLES = [
  'coordinator',
  ...ROLES,
  'persistence',
  'client',
  'observer',
] as const satisfies readonly string[];
export type NatsRole = (typeof NATS_ROLES)[number];

/** Allowed and denied subjects for one direction (publish or subscribe). */
export interface SubjectRules {
  readonly allow: readonly string[];
  readonly deny: readonly string[];
}

/** The permissions of one role's credential. */
export interface RolePermissions {
  readonly publish: SubjectRules;
  readonly subscribe: SubjectRules;
  /** What the role is for, in one line (for the generated config and the docs). */
  readonly summary: string;
}

const JS_API = '$JS.API';
const KV_STREAM = `KV_${LEASE_BUCKET}`;

/** Every process checks JetStream and pge's streams (and may read the lease bucket's) at start. */
const STREAM_CHECKS = [`${JS_API}.INFO`, ...[...PGE_STREAMS.map((s) => s.name), KV_STREAM].map(streamInfo)];

/** Looking up what a stream holds, from its leader, as pge's readers do (nats-stored.ts). */
const streamLookup = (stream: string): string => `${JS_API}.STREAM.MSG.GET.${stream}`;

/**
 * Reading what a stream holds by lookups and by direct gets, which a reader of another system may
 * use (docs/integration.md): nothing that changes it.
 */
function streamReading(stream: string): string[] {
  return [streamLookup(stream), `${JS_API}.DIRECT.GET.${stream}`, `${JS_API}.DIRECT.GET.${stream}.>`];
}

/** Taking messages from a durable consumer the coordinator made: its info, pulls and acks. */
function durableTaking(stream: string, durable: string): string[] {
  return [
    `${JS_API}.CONSUMER.INFO.${stream}.${durable}`,
    `${JS_API}.CONSUMER.MSG.NEXT.${stream}.${durable}`,
    `$JS.ACK.${stream}.${durable}.>`,
  ];
}

/** Reading the run-lease bucket: a role worker checks that a work item's run is live. */
const LEASE_READING = [streamLookup(KV_STREAM)];

/**
 * A role's private inbox prefix: where replies to its requests (its JetStream calls and pulls
 * included) arrive, readable by that role only. A process takes it from its credential (see
 * `inboxPrefixOfCreds`); a client of your own sets it as nats.js's `inboxPrefix`.
 */
export function inboxPrefixOf(role: NatsRole): string {
  return `_INBOX_${role}`;
}

const inbox = (role: NatsRole) => `${inboxPrefixOf(role)}.>`;

/** Where the server has a request from another account answered: its own reply subjects. */
const SERVICE_REPLIES = '_R_.>';

/** A role worker of `role`: takes its role's work, publishes its role's results, hears cancels. */
function roleWorker(role: Role): RolePermissions {
  const work = subjects.work(role);
  return {
    publish: {
      allow: [
        subjects.result('*', role),
        // That it is there, and which model serves its role: for its role only.
        subjects.presence(role),
        subjects.rejected(role),
        ...STREAM_CHECKS,
        ...LEASE_READING,
        // Its role's durable consumer, which a coordinator made with its role's filter.
        ...durableTaking(WORK_STREAM, workerQueue(role)),
      ],
      deny: [],
    },
    subscribe: { allow: [inbox(role), subjects.cancel('*')], deny: [] },
    summary: `takes ${role} work from ${work}, publishes ${role} results and says which model serves it (${subjects.presence(role)}); nothing else`,
  };
}

const readerSubscriptions = (role: NatsRole) => ({
  allow: [inbox(role), subjects.events('*'), subjects.storedEvents('*'), subjects.rejected('*')],
  deny: [],
});

/** The permissions of each role's credential. */
export const ROLE_PERMISSIONS: Readonly<Record<NatsRole, RolePermissions>> = {
  coordinator: {
    publish: {
      allow: [
        subjects.events('*'),
        'pge.work.>',
        subjects.cancel('*'),
        // Answers to submissions and resume requests, which reach it from the clients' account
        // with a reply subject the server chose (service imports reply on `_R_.…`).
        SERVICE_REPLIES,
        // Failed results of work no worker finished (answerAbandonedWork).
        subjects.result('*', '*'),
        subjects.rejected('coordinator'),
        // Streams, consumers, the lease bucket, message lookups and deletes of abandoned work.
        `${JS_API}.>`,
        `$KV.${LEASE_BUCKET}.>`,
        '$JS.ACK.>',
        '$JS.FC.>',
      ],
      deny: [],
    },
    subscribe: {
      allow: [
        inbox('coordinator'),
        subjects.submit,
        subjects.resume,
        subjects.cancelRun,
        subjects.coordinatorPing,
        subjects.control('*'),
        subjects.approval('*'),
        subjects.presence('*'),
        `$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.${WORK_STREAM}.*`,
      ],
      deny: [],
    },
    summary: 'drives runs: publishes run events, work items and cancels; owns the streams and run leases',
  },
  planner: roleWorker('planner'),
  generator: roleWorker('generator'),
  evaluator: roleWorker('evaluator'),
  persistence: {
    publish: {
      allow: [
        ...STREAM_CHECKS,
        ...durableTaking(EVENTS_STREAM, PERSISTENCE_CONSUMER),
        // A run it joined midway, read back from its first event; a gap in what it was delivered.
        streamLookup(EVENTS_STREAM),
        // A log that cannot be written stops its run.
        subjects.control('*'),
        subjects.rejected('persistence'),
      ],
      deny: [],
    },
    subscribe: { allow: [inbox('persistence')], deny: [] },
    summary: 'reads every run event from PGE_EVENTS and writes the logs; may stop a run whose log fails',
  },
  client: {
    publish: {
      allow: [
        subjects.submit,
        subjects.resume,
        // Whether a coordinator runs: a submission nobody serves gets no answer across accounts.
        subjects.coordinatorPing,
        subjects.control('*'),
        // Decisions at runs' gates and cancels of runs: a person's, so a client's alone.
        subjects.approval('*'),
        subjects.cancelRun,
        subjects.rejected('client'),
        ...STREAM_CHECKS,
        ...streamReading(EVENTS_STREAM),
      ],
      deny: [],
    },
    subscribe: readerSubscriptions('client'),
    summary:
      'submits runs, follows their events, sends control (interrupt, resume, cancel) for runs, and decides their gates',
  },
  observer: {
    publish: {
      // Rejection reports: a reader reports messages it refused, as every process does.
      allow: [subjects.rejected('observer'), ...STREAM_CHECKS, ...streamReading(EVENTS_STREAM)],
      deny: [],
    },
    subscribe: readerSubscriptions('observer'),
    summary: 'reads run events (the dashboard); publishes nothing but reports of messages it refused',
  },
};

/**
 * What the account of a role other than the coordinator's imports from the coordinator's account,
 * `PGE`, which holds the streams: every subject its credential may publish to, as a service (so
 * that a reply crosses back to the requester through a reply subject the server chooses), but the
 * ones nobody answers, which its account exports as a stream for `PGE` to import instead (so the
 * server keeps no way back for a reply subject a publisher puts on them); and every subject it may
 * subscribe to but its own inbox, as a stream.
 *
 * Nothing else crosses between accounts, so whatever a process has published in its own account
 * (the JetStream API's answers to reply subjects it named included) reaches the streams only on a
 * subject its role may publish itself.
 */
export interface AccountImports {
  /** Requests published into `PGE`, answered as `serviceResponse` says. */
  readonly services: readonly string[];
  /** Messages published into `PGE` that nobody answers: exported by the role's account. */
  readonly sends: readonly string[];
  /** Subjects `PGE` publishes that the role hears. */
  readonly streams: readonly string[];
}

/** What `role`'s account imports from `PGE`, and sends it (the coordinator's account is `PGE`). */
export function accountImports(role: Exclude<NatsRole, 'coordinator'>): AccountImports {
  const { publish, subscribe } = ROLE_PERMISSIONS[role];
  const notRejections = (subject: string) => !isRejections(subject);
  const publishes = publish.allow.filter(notRejections);
  return {
    services: publishes.filter((subject) => !ONE_WAY.includes(subject)),
    sends: publishes.filter((subject) => ONE_WAY.includes(subject)),
    streams: subscribe.allow.filter((subject) => subject !== inbox(role) && notRejections(subject)),
  };
}

/** Subjects published into `PGE` that nobody answers (rejection reports aside, see below). */
const ONE_WAY: readonly string[] = [
  subjects.control('*'),
  subjects.approval('*'),
  ...ROLES.map((role) => subjects.presence(role)),
];

/**
 * How the answer to a request from another account comes back: once, or (JetStream's answer to a
 * pull) as many messages; and how long the server keeps the way back (the export's response
 * threshold), which bounds what requests that are never answered cost it.
 */
export interface ServiceResponse {
  readonly type: 'Singleton' | 'Stream';
  readonly thresholdMs: number;
}

/** The way back of a pull outlives the pull itself by this much. */
const PULL_MARGIN_MS = 5_000;
/**
 * The JetStream API, a stored publish's acknowledgement and a coordinator's ping answer at once
 * (nats.js waits 5 s).
 */
const ANSWER_MS = 5_000;

/** How the answer to a request on `subject` comes back (see `ServiceResponse`). */
export function serviceResponse(subject: string): ServiceResponse {
  if (subject.startsWith(`${JS_API}.CONSUMER.MSG.NEXT.`)) {
    return { type: 'Stream', thresholdMs: PULL_EXPIRES_MS + PULL_MARGIN_MS };
  }
  if (subject === subjects.submit) return { type: 'Singleton', thresholdMs: SUBMIT_ANSWER_MS };
  if (subject === subjects.resume) return { type: 'Singleton', thresholdMs: RESUME_ANSWER_MS };
  if (subject === subjects.cancelRun) return { type: 'Singleton', thresholdMs: CANCEL_ANSWER_MS };
  return { type: 'Singleton', thresholdMs: ANSWER_MS };
}

/**
 * Reports of refused messages (`pge.errors.rejected.<role>`) come from every process, and a message
 * one account imports from another is not passed on to a third: so every account exports its own
 * role's reports, and the accounts whose role reads them (and `PGE`, for operators) import every
 * other account's.
 */
export function hearsRejections(role: NatsRole): boolean {
  return role === 'coordinator' || ROLE_PERMISSIONS[role].subscribe.allow.includes(subjects.rejected('*'));
}

function isRejections(subject: string): boolean {
  return subjectMatches(subjects.rejected('*'), subject);
}

function streamInfo(stream: string): string {
  return `${JS_API}.STREAM.INFO.${stream}`;
}
