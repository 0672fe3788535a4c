import type { Role } from '../schemas/index.js';
import { ROLES } from '../schemas/setting-values.js';
import { EVENTS_STREAM, PERSISTENCE_CONSUMER, PGE_STREAMS, WORK_STREAM } from './nats-streams.js';
import { LEASE_BUCKET } from './run-leases.js';
import { subjectMatches, subjects, workerQueue } from './subjects.js';

/**
 * What each process of a deployment may publish and subscribe to on NATS: the one source of the
 * permissions `pge nats-config` writes into credentials, and that docs/security.md lists. Every
 * list is an allow list (everything else is refused by the server); a deny entry takes precedence
 * over an allow.
 *
 * Besides pge's own subjects, each process needs the JetStream API subjects of what it does with
 * streams: `$JS.API.INFO` and stream info (every process checks the streams at start), consumer
 * create/info/next/delete on the streams it reads, `$JS.ACK.<stream>.<consumer>.>` for the
 * consumers it acknowledges. Only a coordinator creates and updates streams and the run-lease
 * bucket, publishes events and work, and answers abandoned work.
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

/**
 * Reading a stream through consumers of its own (ephemeral or named), and reading single messages
 * (`last_by_subj` lookups): never anything that changes what the stream holds.
 */
function streamReading(stream: string): string[] {
  return [
    // Named consumers only (`CREATE.<stream>.<name>.<filter>`): a create without the name in its
    // subject could name another's consumer in its body, where no deny entry can see it.
    `${JS_API}.CONSUMER.CREATE.${stream}.>`,
    `${JS_API}.CONSUMER.INFO.${stream}.*`,
    `${JS_API}.CONSUMER.MSG.NEXT.${stream}.*`,
    `${JS_API}.CONSUMER.DELETE.${stream}.*`,
    `${JS_API}.STREAM.MSG.GET.${stream}`,
    `${JS_API}.DIRECT.GET.${stream}`,
    `${JS_API}.DIRECT.GET.${stream}.>`,
  ];
}

/** The persistence worker's durable consumer: no other role may create, change, read or delete it. */
const PERSISTENCE_CONSUMER_API = [
  `${JS_API}.CONSUMER.*.${EVENTS_STREAM}.${PERSISTENCE_CONSUMER}`,
  `${JS_API}.CONSUMER.*.${EVENTS_STREAM}.${PERSISTENCE_CONSUMER}.>`,
  `${JS_API}.CONSUMER.MSG.NEXT.${EVENTS_STREAM}.${PERSISTENCE_CONSUMER}`,
  `${JS_API}.CONSUMER.DURABLE.CREATE.${EVENTS_STREAM}.${PERSISTENCE_CONSUMER}`,
];

/** Reading the run-lease bucket: a role worker checks that a work item's run is live. */
const LEASE_READING = [`${JS_API}.DIRECT.GET.${KV_STREAM}.>`, `${JS_API}.STREAM.MSG.GET.${KV_STREAM}`];

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
  const durable = workerQueue(role);
  const work = subjects.work(role);
  return {
    publish: {
      allow: [
        subjects.result('*', role),
        subjects.rejected(role),
        ...STREAM_CHECKS,
        ...LEASE_READING,
        // Its role's durable consumer, with its role's filter: the server checks the config's
        // filter against the one in the subject, so no other role's work can be taken through it.
        `${JS_API}.CONSUMER.CREATE.${WORK_STREAM}.${durable}.${work}`,
        `${JS_API}.CONSUMER.INFO.${WORK_STREAM}.${durable}`,
        `${JS_API}.CONSUMER.MSG.NEXT.${WORK_STREAM}.${durable}`,
        `$JS.ACK.${WORK_STREAM}.${durable}.>`,
      ],
      deny: [],
    },
    subscribe: { allow: [inbox(role), subjects.cancel('*')], deny: [] },
    summary: `takes ${role} work from ${work} and publishes ${role} results; nothing else`,
  };
}

const readerSubscriptions = (role: NatsRole) => ({
  allow: [inbox(role), subjects.events('*'), subjects.rejected('*')],
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
        subjects.control('*'),
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
        ...streamReading(EVENTS_STREAM),
        `${JS_API}.CONSUMER.DURABLE.CREATE.${EVENTS_STREAM}.${PERSISTENCE_CONSUMER}`,
        `$JS.ACK.${EVENTS_STREAM}.${PERSISTENCE_CONSUMER}.>`,
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
        subjects.control('*'),
        subjects.rejected('client'),
        ...STREAM_CHECKS,
        ...streamReading(EVENTS_STREAM),
      ],
      deny: PERSISTENCE_CONSUMER_API,
    },
    subscribe: readerSubscriptions('client'),
    summary: 'submits runs, follows their events, and sends control (interrupt, resume) for runs',
  },
  observer: {
    publish: {
      // Rejection reports: a reader reports messages it refused, as every process does.
      allow: [subjects.rejected('observer'), ...STREAM_CHECKS, ...streamReading(EVENTS_STREAM)],
      deny: PERSISTENCE_CONSUMER_API,
    },
    subscribe: readerSubscriptions('observer'),
    summary: 'reads run events (the dashboard); publishes nothing but reports of messages it refused',
  },
};

/**
 * What the account of a role other than the coordinator's imports from the coordinator's account,
 * `PGE`, which holds the streams: every subject its credential may publish to, as a service (so
 * that a reply crosses back to the requester through a reply subject the server chooses), and
 * every subject it may subscribe to but its own inbox, as a stream. The JetStream API and
 * acknowledgements are imported whole; the credential's permissions narrow them per role.
 *
 * Nothing else crosses between accounts, so whatever a process has published in its own account
 * (the JetStream API's answers to reply subjects it named included) reaches the streams only on a
 * subject its role may publish itself.
 */
export interface AccountImports {
  /** Subjects published into `PGE`: requests, and messages that need no answer. */
  readonly services: readonly string[];
  /** Subjects `PGE` publishes that the role hears. */
  readonly streams: readonly string[];
}

/** The JetStream API and acknowledgement subjects, as an account imports them. */
export const JS_API_IMPORT = `${JS_API}.>`;
const JS_ACK_IMPORT = '$JS.ACK.>';

/** What `role`'s account imports from `PGE` (the coordinator's account imports nothing). */
export function accountImports(role: Exclude<NatsRole, 'coordinator'>): AccountImports {
  const { publish, subscribe } = ROLE_PERMISSIONS[role];
  const services = new Set<string>();
  for (const subject of publish.allow) {
    if (subject.startsWith(`${JS_API}.`)) services.add(JS_API_IMPORT);
    else if (subject.startsWith('$JS.ACK.')) services.add(JS_ACK_IMPORT);
    else if (!isRejections(subject)) services.add(subject);
  }
  const streams = subscribe.allow.filter((subject) => subject !== inbox(role) && !isRejections(subject));
  return { services: [...services], streams };
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
