// The reference relay, @byollm/relay 0.1.1, in memory, served over HTTP on
// loopback, routing by the same projection JSON byorelay imports: the
// benchmark's third target, so byorelay and the reference run identical
// work side by side.
//
//   node localtest/refrelay/relay.mjs --projection fixture.json [--port 0]
//
// Prints one line, {"event":"listening","origin":"http://127.0.0.1:PORT"},
// once it accepts requests, and exits when its stdin closes, so a parent
// that dies cannot leave it running.
import { createServer } from "node:http";
import { readFileSync } from "node:fs";

// ESM ignores NODE_PATH and resolves bare names from the importing file's
// folder upward; the packages are in localtest/js/node_modules, so each is
// imported by the file its package.json exports.
const modules = new URL("../js/node_modules/", import.meta.url);

async function load(name) {
  const dir = new URL(`${name}/`, modules);
  const pkg = JSON.parse(readFileSync(new URL("package.json", dir), "utf8"));
  const root = pkg.exports?.["."] ?? pkg.exports ?? pkg.main;
  const entry = typeof root === "string" ? root : (root.import ?? root.default);
  return import(new URL(entry, dir).href);
}

function flags(argv) {
  const out = { port: "0" };
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith("--") || argv[i + 1] === undefined) {
      throw new Error(`bad arguments near ${argv[i]}`);
    }
    out[argv[i].slice(2)] = argv[i + 1];
  }
  if (out.projection === undefined) throw new Error("--projection is required");
  return out;
}

const args = flags(process.argv.slice(2));
const { Relay } = await load("@byollm/relay");
// Parsed by the relay's own zod schema (Projection's constructor), so a
// fixture byorelay accepts and the reference refuses fails here, loudly.
const fixture = JSON.parse(readFileSync(args.projection, "utf8"));
const relay = new Relay({ fixture });

const server = createServer(async (req, res) => {
  try {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    const body = Buffer.concat(chunks);
    const request = new Request(`http://127.0.0.1${req.url}`, {
      method: req.method,
      headers: req.headers,
      ...(req.method === "GET" || req.method === "HEAD" ? {} : { body }),
    });
    const response = await relay.handle(request);
    res.writeHead(response.status, Object.fromEntries(response.headers.entries()));
    res.end(Buffer.from(await response.arrayBuffer()));
  } catch (error) {
    // The reference throws on a store failure; answer as a Lambda would
    // rather than leaving the socket hanging.
    res.writeHead(500, { "content-type": "application/json" });
    res.end(JSON.stringify({ error: "internal", message: String(error) }));
  }
});
// Many concurrent keep-alive clients: the default 5 s keep-alive would
// close sockets the benchmark is about to reuse.
server.keepAliveTimeout = 60_000;

server.listen(Number(args.port), "127.0.0.1", () => {
  const origin = `http://127.0.0.1:${server.address().port}`;
  process.stdout.write(JSON.stringify({ event: "listening", origin }) + "\n");
});
process.stdin.resume();
process.stdin.on("end", () => process.exit(0));
