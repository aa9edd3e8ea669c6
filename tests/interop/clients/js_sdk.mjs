// A client built on @a2a-js/sdk 0.3.x (A2A 0.3 over JSON-RPC: the card at
// <base>/.well-known/agent.json), run by tests/interop with node: prints what it saw as JSON
// lines (one {"event": ...} per event, then {"end": true} or {"error": "..."}).
//
//   node js_sdk.mjs '{"sdk_dir": "<dir whose node_modules holds @a2a-js/sdk>",
//                     "action": "stream", "base_url": "http://127.0.0.1:8080/<endpoint_id>",
//                     "message": {<an A2A 0.3 Message>}}'
//   action "resubscribe" takes "task_id" instead of "message";
//   "card_path" (optional) is the client's second argument, the card's path below base_url.
import { createRequire } from "node:module";
import { join } from "node:path";

const args = JSON.parse(process.argv[2]);
const { A2AClient } = createRequire(join(args.sdk_dir, "package.json"))("@a2a-js/sdk/client");

function emit(line) {
  process.stdout.write(JSON.stringify(line) + "\n");
}

async function run() {
  const client = args.card_path === undefined
    ? new A2AClient(args.base_url)
    : new A2AClient(args.base_url, args.card_path);
  const stream = args.action === "stream"
    ? client.sendMessageStream({ message: args.message })
    : client.resubscribeTask({ id: args.task_id });
  for await (const event of stream) {
    emit({ event });
  }
}

try {
  await run();
  emit({ end: true });
} catch (error) {
  emit({ error: `${error.name}: ${error.message}` });
}
