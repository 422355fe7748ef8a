// A second, independent MCP client for the ledger's tests: the TypeScript SDK's own Client over its
// StreamableHTTPClientTransport, with a bearer header, against a running ledger.
//
//   LEDGER_MCP_TS_MODULES=<node_modules with @modelcontextprotocol/sdk> node tests/mcp_ts_client.mjs JOB
//
// JOB is JSON: {"url": ..., "token": ..., "calls": [{"name": ..., "arguments": {...}, "meta": {...}}]};
// "headers" instead of "token" sends those headers as they are (a client configuration's).
// It connects (the initialize handshake), lists the tools, makes each call in order, and prints one
// JSON object: {protocolVersion, serverInfo, instructions, tools, calls}. The SDK validates every
// answer against its own schemas, so a result it cannot parse fails here rather than in the test.
import { createRequire } from "node:module";
import path from "node:path";

const modules = process.env.LEDGER_MCP_TS_MODULES;
if (!modules) {
  console.error("LEDGER_MCP_TS_MODULES is not set (the node_modules holding @modelcontextprotocol/sdk)");
  process.exit(2);
}
// The SDK lives in an ignored cache, not beside this script: resolve it from there.
const require = createRequire(path.join(modules, "resolve-from-here.js"));
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");

const job = JSON.parse(process.argv[2]);
const transport = new StreamableHTTPClientTransport(new URL(job.url), {
  requestInit: { headers: job.headers ?? { Authorization: `Bearer ${job.token}` } },
});
const client = new Client({ name: "ledger-ts-test-client", version: "1.0.0" });

try {
  await client.connect(transport);
  const listed = await client.listTools();
  const calls = [];
  for (const call of job.calls ?? []) {
    const params = { name: call.name, arguments: call.arguments ?? {} };
    if (call.meta) params._meta = call.meta;
    calls.push(await client.callTool(params));
  }
  console.log(JSON.stringify({
    protocolVersion: transport.protocolVersion ?? null,
    serverInfo: client.getServerVersion() ?? null,
    instructions: client.getInstructions() ?? null,
    tools: listed.tools,
    calls,
  }));
} catch (error) {
  // A JSON-RPC error keeps its code, so that the test can tell a refusal from a broken client.
  console.log(JSON.stringify({ error: { name: error?.name, code: error?.code ?? null, message: String(error?.message ?? error) } }));
  process.exitCode = 1;
} finally {
  await client.close();
}
