import { readFileSync } from 'node:fs';
import { type Diagnostic, Parser } from '@asyncapi/parser';
import { describe, expect, it } from 'vitest';
import { stringify } from 'yaml';
import { buildAsyncApi, renderAsyncApi } from '../../scripts/gen-asyncapi.js';
import { TRACEPARENT_HEADER } from '../../src/bus/bus.js';
import { subjects } from '../../src/bus/subjects.js';
import { Role } from '../../src/schemas/index.js';
import {
  at,
  DOC_TEXT,
  doc,
  EVENT_TYPES,
  type Json,
  messageOfType,
  payloadOf,
  REQUEST_TYPES,
} from './asyncapi-support.js';

/**
 * The AsyncAPI document is the contract other languages code against. It is regenerated on every
 * run and compared with the committed file; `@asyncapi/parser`, the reference parser, validates it
 * (the AsyncAPI 3 schema, its JSON Schemas, every $ref, every operation's channel and messages);
 * and it names every subject pge builds and every event type. The message schemas are held to the
 * zod schemas in asyncapi-payloads.test.ts.
 */

const parser = new Parser();

/** What the parser finds wrong with `text`: its errors and warnings (hints and infos left out). */
async function problemsOf(text: string): Promise<string[]> {
  const { document, diagnostics } = await parser.parse(text);
  const problems = diagnostics
    .filter((d: Diagnostic) => d.severity <= 1)
    .map((d: Diagnostic) => `${d.code} at ${d.path.join('/')}: ${d.message}`);
  if (!document && problems.length === 0) problems.push('the parser made no document');
  return problems;
}

/** The committed document with the node at `pointer` set to `value`, as YAML. */
function brokenCopy(pointer: string, value: unknown): string {
  const copy = structuredClone(doc);
  const parts = pointer.slice(2).split('/');
  const key = parts.pop()!;
  let node = copy;
  for (const part of parts) node = node[part] as Json;
  if (!(key in node)) throw new Error(`the document has nothing at ${pointer} to break`);
  node[key] = value;
  return stringify(copy, { aliasDuplicateObjects: false });
}

describe('docs/asyncapi.yaml, by @asyncapi/parser', () => {
  it('is a valid AsyncAPI document, with no error and no warning', async () => {
    expect(await problemsOf(DOC_TEXT)).toEqual([]);
  }, 30_000);

  it('would not be if it were broken: a missing $ref, a bad schema, a foreign message, an undeclared parameter', async () => {
    const broken: Record<string, string> = {
      'a $ref to no message': brokenCopy('#/channels/runEvents/messages/RunStarted', {
        $ref: '#/components/messages/Nope',
      }),
      'a type JSON Schema does not have': brokenCopy(
        '#/components/schemas/RunSubmission/properties/task/type',
        'strng',
      ),
      'an operation sending a message of another channel': brokenCopy('#/operations/submitRun/messages', [
        { $ref: '#/channels/rejections/messages/MessageRejection' },
      ]),
      'an address parameter that is not declared': brokenCopy('#/channels/work/address', 'pge.work.{worker}'),
    };
    for (const [what, text] of Object.entries(broken)) {
      expect((await problemsOf(text)).length, what).toBeGreaterThan(0);
    }
  }, 60_000);
});

describe('docs/asyncapi.yaml', () => {
  it('is what scripts/gen-asyncapi.ts generates from the current schemas', () => {
    const committed = DOC_TEXT;
    const generated = renderAsyncApi();
    const a = committed.split('\n');
    const b = generated.split('\n');
    const line = a.findIndex((text, i) => text !== b[i]);
    expect(
      committed === generated,
      `docs/asyncapi.yaml is out of date (first difference at line ${line + 1}): run \`npx tsx scripts/gen-asyncapi.ts\` and commit the result`,
    ).toBe(true);
  });

  it('is an AsyncAPI 3.0.0 document for pge at the package version, on a NATS server', () => {
    const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8'));
    expect(doc.asyncapi).toBe('3.0.0');
    expect(at('#/info')).toMatchObject({ title: 'pge', version: pkg.version });
    expect(at('#/servers/nats')).toMatchObject({
      protocol: 'nats',
      host: '{host}',
      variables: { host: { default: 'localhost:4222' } },
    });
    const deployed = buildAsyncApi({ natsUrl: 'nats://nats.internal:4333' }) as {
      servers: { nats: { variables: { host: { default: string } } } };
    };
    expect(deployed.servers.nats.variables.host.default).toBe('nats.internal:4333');
  });

  it('is deterministic', () => {
    expect(renderAsyncApi()).toBe(renderAsyncApi());
  });

  it('has a channel for every subject that subjects builds, and none for a subject it does not', () => {
    const built: Record<keyof typeof subjects, string[]> = {
      event: EVENT_TYPES.map((type) => subjects.event('run-1', type)),
      events: [subjects.events('run-1'), subjects.events('*')],
      storedEvents: [subjects.storedEvents('run-1'), subjects.storedEvents('*')],
      work: Role.options.map((role) => subjects.work(role)),
      result: [subjects.result('run-1'), subjects.result('*')],
      submit: [subjects.submit],
      resume: [subjects.resume],
      cancelRun: [subjects.cancelRun],
      coordinatorPing: [subjects.coordinatorPing],
      rejected: [subjects.rejected('coordinator'), subjects.rejected('*')],
      control: [subjects.control('run-1'), subjects.control('*')],
      approval: [subjects.approval('run-1'), subjects.approval('*')],
      cancel: [subjects.cancel('run-1'), subjects.cancel('*')],
      presence: [subjects.presence('generator'), subjects.presence('*')],
    };
    // A subject builder added to `subjects` must be added above, or this fails.
    expect(Object.keys(built).sort()).toEqual(Object.keys(subjects).sort());

    const channels =
      at<Record<string, { address: string | null; parameters?: Record<string, Json> }>>('#/channels');
    const matchers = Object.entries(channels)
      .filter(([, channel]) => channel.address !== null)
      .map(([name, channel]) => {
        const source = (channel.address as string)
          .split(/(\{[A-Za-z]+\})/)
          .map((part) => {
            const param = /^\{([A-Za-z]+)\}$/.exec(part)?.[1];
            if (!param) return part.replace(/[.*+?^${}()|[\]\\>]/g, '\\$&');
            // `type` is a dotted event type, so it spans one or more subject tokens.
            return param === 'type' ? `(?<${param}>[^.]+(?:\\.[^.]+)*)` : `(?<${param}>[^.]+)`;
          })
          .join('');
        return { name, channel, regex: new RegExp(`^${source}$`) };
      });
    const channelsOf = (subject: string) =>
      matchers
        .filter(({ channel, regex }) => {
          const groups = regex.exec(subject)?.groups;
          if (!regex.test(subject)) return false;
          // A concrete token must be one the parameter allows; `*` and `>` are subscriptions.
          return Object.entries(groups ?? {}).every(([param, value]) => {
            const allowed = (channel.parameters?.[param] as { enum?: string[] } | undefined)?.enum;
            return value === '*' || value === '>' || !allowed || allowed.includes(value);
          });
        })
        .map(({ name }) => name);

    const all = Object.values(built).flat();
    for (const subject of all) expect(channelsOf(subject), subject).toHaveLength(1);
    for (const { name, regex } of matchers) {
      expect(
        all.some((subject) => regex.test(subject)),
        `channel ${name} has no subject in subjects.ts`,
      ).toBe(true);
    }
    expect(channelsOf('pge.run.run-1.evt.step.made.up')).toEqual([]);
    expect(channelsOf('pge.work.janitor')).toEqual([]);
  });

  it('declares exactly the parameters each channel address uses', () => {
    for (const [name, channel] of Object.entries(at<Record<string, Json>>('#/channels'))) {
      const used = [...String(channel.address ?? '').matchAll(/\{([A-Za-z]+)\}/g)].map((m) => m[1]);
      expect(Object.keys((channel.parameters as Json | undefined) ?? {}).sort(), name).toEqual(used.sort());
    }
    expect(at('#/channels/runEvents/parameters/type')).toMatchObject({ enum: EVENT_TYPES });
    expect(at('#/channels/work/parameters/role')).toMatchObject({ enum: Role.options });
  });

  it('has one message per event type, each on the events channel, the requests also on the work queues', () => {
    const onEvents = Object.keys(at('#/channels/runEvents/messages'));
    const onWork = Object.keys(at('#/channels/work/messages'));
    for (const type of EVENT_TYPES) {
      const message = messageOfType(type);
      expect(onEvents).toContain(message);
      expect(payloadOf(message)).toMatchObject({ properties: { type: { const: type } } });
    }
    expect(onEvents).toHaveLength(EVENT_TYPES.length);
    expect(onWork.map((m) => at<{ name: string }>(`#/components/messages/${m}`).name)).toEqual(REQUEST_TYPES);
    // A work item carries the trace context of the span that asked, beside its message id.
    for (const m of onWork)
      expect(at(`#/components/messages/${m}/headers`)).toEqual({ $ref: '#/components/schemas/WorkHeaders' });
    expect(Object.keys(at('#/components/schemas/WorkHeaders/properties'))).toEqual([
      'Nats-Msg-Id',
      TRACEPARENT_HEADER,
    ]);
    expect(
      payloadOf(at<{ $ref: string }>('#/channels/runResults/messages/RoleResult').$ref.split('/').pop()!),
    ).toBe(at('#/components/schemas/RoleResult'));
  });

  it('has the submission request/reply, with the reply on its own channel', () => {
    for (const operation of ['submitRun', 'acceptSubmission']) {
      expect(at(`#/operations/${operation}`)).toMatchObject({
        channel: { $ref: '#/channels/runSubmit' },
        reply: {
          channel: { $ref: '#/channels/runSubmitReply' },
          messages: [{ $ref: '#/channels/runSubmitReply/messages/RunSubmissionReply' }],
        },
      });
    }
    expect(at('#/channels/runSubmit')).toMatchObject({ address: subjects.submit });
    expect(at('#/channels/rejections')).toMatchObject({ address: 'pge.errors.rejected.{reporter}' });
  });
});
