import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { answerRequest } from '../../src/roles/answer-request.js';
import type { Model } from '../../src/roles/model.js';
import type { RoleRequest } from '../../src/schemas/index.js';
import { toolNameOf } from '../../src/tools/mcp.js';
import { runToolCall, type Tool, workspaceTools } from '../../src/tools/tools.js';
import { MAX_IMAGE_BYTES, MAX_IMAGES, Workspace } from '../../src/tools/workspace.js';
import { fullRun } from '../persistence/fixtures.js';

/** The workspace tools stay in their workspace, and a tool call is bounded and never throws at the model. */

let base: string;
let workspace: Workspace;
let outside: string;
const NEVER = new AbortController().signal;
const limits = { maxCalls: 10, timeoutMs: 200, maxOutputChars: 200 };

beforeEach(() => {
  base = mkdtempSync(join(tmpdir(), 'pge-workspace-'));
  outside = join(base, 'outside');
  mkdirSync(outside);
  writeFileSync(join(outside, 'secret.txt'), 'not yours');
  workspace = new Workspace(join(base, 'ws'));
});
afterEach(() => rmSync(base, { recursive: true, force: true }));

const tools = () => new Map(workspaceTools(workspace, true).map((t) => [t.definition.name, t]));
const call = (name: string, args: object) =>
  runToolCall({ id: 'c', name, arguments: JSON.stringify(args) }, tools(), limits, NEVER);

describe('Workspace', () => {
  it('lists at most 500 files, read from at most 500 directories', () => {
    const many = join(base, 'ws', 'many');
    mkdirSync(many, { recursive: true });
    for (let i = 0; i < 600; i++) writeFileSync(join(many, `f${i}.txt`), '');
    expect(workspace.list()).toHaveLength(500);
    rmSync(join(base, 'ws'), { recursive: true });
    // The workspace and 500 directories nested in it: the deepest, the 501st, is never read.
    const deep = join(base, 'ws', ...Array.from({ length: 500 }, () => 'd'));
    mkdirSync(deep, { recursive: true });
    writeFileSync(join(deep, 'deep.txt'), '');
    writeFileSync(join(base, 'ws', 'top.txt'), '');
    expect(workspace.list()).toEqual(['top.txt']);
    rmSync(join(deep, 'deep.txt'));
    writeFileSync(join(deep, '..', 'shallower.txt'), '');
    expect(workspace.list()).toEqual([
      `${Array.from({ length: 499 }, () => 'd').join('/')}/shallower.txt`,
      'top.txt',
    ]);
  });

  it('writes, lists and reads inside, making directories, and refuses every way out', async () => {
    expect((await call('write_file', { path: 'a/b.txt', content: 'hi' })).answer).toBe(
      'wrote 2 bytes to a/b.txt',
    );
    expect((await call('list_files', {})).answer).toBe('a/b.txt');
    expect((await call('read_file', { path: 'a/b.txt' })).answer).toBe('hi');
    mkdirSync(join(base, 'ws', 'links'));
    symlinkSync(outside, join(base, 'ws', 'links', 'dir'));
    symlinkSync(join(outside, 'secret.txt'), join(base, 'ws', 'links', 'file'));
    symlinkSync(join(outside, 'missing.txt'), join(base, 'ws', 'links', 'dangling'));
    for (const path of [
      '../outside/new.txt',
      'a/../../outside/new.txt',
      join(outside, 'new.txt'),
      'links/dir/new.txt',
      'links/file',
      'links/dangling',
    ]) {
      const written = await call('write_file', { path, content: 'x' });
      expect(written.record.ok, path).toBe(false);
      expect(written.answer, path).toMatch(/^error: .*(outside the workspace|not a path in the workspace)/);
    }
    for (const path of ['links/file', 'links/dir/secret.txt', '../outside/secret.txt']) {
      expect((await call('read_file', { path })).answer, path).toMatch(/^error: /);
    }
    expect(existsSync(join(outside, 'new.txt'))).toBe(false);
    expect(existsSync(join(outside, 'missing.txt'))).toBe(false);
    expect(readFileSync(join(outside, 'secret.txt'), 'utf8')).toBe('not yours');
  });

  it('lists an empty workspace without making it', async () => {
    expect((await call('list_files', {})).answer).toBe('(the workspace is empty)');
    expect(existsSync(join(base, 'ws'))).toBe(false);
  });
});

describe('runToolCall', () => {
  it('answers an unknown tool, bad arguments, a failure and a slow tool with the reason, and cuts long answers', async () => {
    expect((await call('rm_rf', {})).answer).toMatch(/^error: there is no tool "rm_rf"/);
    const bad = await runToolCall(
      { id: 'c', name: 'read_file', arguments: '{not json' },
      tools(),
      limits,
      NEVER,
    );
    expect(bad.answer).toMatch(/^error: the arguments are not valid JSON/);
    expect((await call('read_file', { path: 3 })).answer).toBe('error: "path" must be a string');
    const slow: Tool = {
      definition: { name: 'slow', description: '', parameters: {} },
      run: () => new Promise((resolve) => setTimeout(() => resolve('late'), 2_000)),
    };
    const timed = await runToolCall(
      { id: 'c', name: 'slow', arguments: '{}' },
      new Map([['slow', slow]]),
      limits,
      NEVER,
    );
    expect(timed.answer).toBe('error: slow took longer than 200 ms');
    expect(timed.record.ok).toBe(false);
    await call('write_file', { path: 'long.txt', content: 'y'.repeat(100) });
    const long = await runToolCall(
      { id: 'c', name: 'read_file', arguments: JSON.stringify({ path: 'long.txt' }) },
      tools(),
      { ...limits, maxOutputChars: 40 },
      NEVER,
    );
    expect(long.answer).toBe(`${'y'.repeat(40)}… [60 more characters cut]`);
  });
});

describe('answerRequest with tools', () => {
  it('runs the rounds of tool calls the model asks for, at most maxCalls, then asks without tools', async () => {
    const run = fullRun('tool-run');
    const request = run.find((e) => e.type === 'step.work.requested') as RoleRequest;
    const offered: boolean[] = [];
    const model: Model = {
      name: 'tool-happy',
      async complete(req) {
        offered.push(req.tools !== undefined);
        const usage = {
          model: 'tool-happy',
          promptTokens: 10,
          completionTokens: 5,
          costUsd: 0.001,
          refusal: null,
        };
        if (req.tools === undefined) {
          const work = { output: 'done', notes: '', selfAssessment: [] };
          return { ...usage, content: JSON.stringify(work), finishReason: 'stop' };
        }
        // Asks for two writes every time it may.
        const toolCalls = [0, 1].map((i) => ({
          id: `c${offered.length}-${i}`,
          name: 'write_file',
          arguments: JSON.stringify({ path: `f${offered.length}-${i}.txt`, content: 'x' }),
        }));
        return { ...usage, content: null, finishReason: 'tool_calls', toolCalls };
      },
    };
    const toolbox = { tools: workspaceTools(workspace, true), limits: { ...limits, maxCalls: 3 } };
    const { calls, result } = await answerRequest(request, model, 0, undefined, { toolbox });
    expect(result.status).toBe('ok');
    // Two rounds (two calls, then one run and one refused), then an answer without tools.
    expect(offered).toEqual([true, true, false]);
    expect(calls.map((c) => c.outcome)).toEqual(['tools', 'tools', 'valid']);
    expect(calls[1]!.toolCalls!.map((t) => t.ok)).toEqual([true, false]);
    expect(calls[1]!.toolCalls![1]!.excerpt).toBe('error: the limit of 3 tool calls is reached: answer now');
    expect(workspace.list()).toEqual(['f1-0.txt', 'f1-1.txt', 'f2-0.txt']);
    expect(calls.reduce((sum, c) => sum + c.promptTokens, 0)).toBe(30);
  });
});

describe('tool names and cancelled calls', () => {
  it("gives an MCP tool a valid function name, distinct from its neighbours', whatever the server calls it", () => {
    expect(toolNameOf('files', 'read_file')).toBe('files__read_file');
    const dotted = toolNameOf('files', 'fs.read');
    const spaced = toolNameOf('files', 'fs read');
    const long = toolNameOf('a-server-with-a-long-name', 'x'.repeat(80));
    for (const name of [dotted, spaced, long]) expect(name).toMatch(/^[A-Za-z0-9_-]{1,64}$/);
    expect(dotted).not.toBe(spaced);
    expect(dotted.startsWith('files__fs_read_')).toBe(true);
  });

  it('runs no tool for a call already cancelled, and hides host paths from the model', async () => {
    const cancelled = new AbortController();
    cancelled.abort(new Error('cancelled'));
    const running = runToolCall(
      { id: 'c', name: 'write_file', arguments: JSON.stringify({ path: 'late.txt', content: 'x' }) },
      tools(),
      limits,
      cancelled.signal,
    );
    await expect(running).rejects.toThrow('cancelled');
    expect(existsSync(join(base, 'ws', 'late.txt'))).toBe(false);
    await call('write_file', { path: 'a.txt', content: 'x' });
    const clash = await call('write_file', { path: 'a.txt/b.txt', content: 'x' });
    expect(clash.answer).toMatch(/^error: cannot use a\.txt\/b\.txt in the workspace \(E[A-Z]+\)$/);
    expect(clash.answer).not.toContain(base);
  });
});

describe('Workspace images', () => {
  it('gives the latest images first, at most MAX_IMAGES, leaving out other files and images too large', async () => {
    mkdirSync(join(base, 'ws', 'renders'), { recursive: true });
    for (let i = 0; i < 6; i++) {
      const path = join(base, 'ws', 'renders', `frame${i}.png`);
      writeFileSync(path, `png ${i}`);
      utimesSync(path, 1_000 + i, 1_000 + i);
    }
    writeFileSync(join(base, 'ws', 'photo.JPG'), 'jpeg');
    utimesSync(join(base, 'ws', 'photo.JPG'), 2_000, 2_000);
    writeFileSync(join(base, 'ws', 'notes.txt'), 'not an image');
    writeFileSync(join(base, 'ws', 'huge.webp'), Buffer.alloc(MAX_IMAGE_BYTES + 1));
    const images = await workspace.images();
    expect(images.map((i) => i.path)).toEqual([
      'photo.JPG',
      'renders/frame5.png',
      'renders/frame4.png',
      'renders/frame3.png',
    ]);
    expect(images.length).toBe(MAX_IMAGES);
    expect(images[0]!.image).toEqual({
      mediaType: 'image/jpeg',
      base64: Buffer.from('jpeg').toString('base64'),
    });
  });
});
