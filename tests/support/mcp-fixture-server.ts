// A small MCP server for the tests, on the official SDK: `shout` answers its text in capitals,
// `secret` answers what no allow-list should let through, `fail` is a tool error. Run as a
// command (`node --import tsx <this file>`) it speaks MCP on stdio; `startMcpHttp` serves it over
// streamable HTTP in-process.
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StdioServerTransport } from '@modelcontextprotocol/sdk/server/stdio.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { z } from 'zod';

function fixtureServer() {
  const server = new McpServer({ name: 'pge-fixture', version: '1.0.0' });
  server.registerTool(
    'shout',
    { description: 'Answers the text in capitals.', inputSchema: { text: z.string() } },
    async ({ text }) => ({ content: [{ type: 'text', text: text.toUpperCase() }] }),
  );
  server.registerTool('secret', { description: 'Not for models.' }, async () => ({
    content: [{ type: 'text', text: 'classified' }],
  }));
  server.registerTool('fail', { description: 'Always fails.' }, async () => ({
    content: [{ type: 'text', text: 'it broke' }],
    isError: true,
  }));
  return server;
}

/** Serves the fixture over streamable HTTP (stateless) on a free loopback port. */
export async function startMcpHttp(): Promise<{ url: string; close: () => Promise<void> }> {
  const http = createServer(async (req, res) => {
    const server = fixtureServer();
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    res.on('close', () => {
      void transport.close();
      void server.close();
    });
    await server.connect(transport);
    await transport.handleRequest(req, res);
  });
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve));
  const { port } = http.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}/mcp`,
    close: () => new Promise<void>((resolve) => http.close(() => resolve())),
  };
}

/** The command that runs the fixture on stdio. */
export const MCP_FIXTURE_COMMAND = {
  command: process.execPath,
  args: ['--import', 'tsx', import.meta.filename],
};

if (process.argv[1] === import.meta.filename) {
  await fixtureServer().connect(new StdioServerTransport());
}
