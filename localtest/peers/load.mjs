// The npm packages live in localtest/js/node_modules (installed by `npm ci`
// there), which is not on the ESM resolution path of scripts in this
// directory: ESM ignores NODE_PATH and resolves bare names from the
// importing file's own folder upward. So each package is imported by the
// file its package.json exports for "import".
import { readFileSync } from "node:fs";

const modules = new URL("../js/node_modules/", import.meta.url);

export async function load(name) {
  const dir = new URL(`${name}/`, modules);
  const pkg = JSON.parse(readFileSync(new URL("package.json", dir), "utf8"));
  const root = pkg.exports?.["."] ?? pkg.exports ?? pkg.main;
  const entry = typeof root === "string" ? root : (root.import ?? root.default);
  return import(new URL(entry, dir).href);
}

// One JSON line per event on stdout: the Go side reads them in order.
export function emit(event, fields = {}) {
  process.stdout.write(JSON.stringify({ event, ...fields }) + "\n");
}

export function fail(message) {
  emit("error", { message });
  process.exit(1);
}

export function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// Flags as --name value pairs; every flag is required unless defaulted.
export function flags(defaults = {}) {
  const out = { ...defaults };
  const argv = process.argv.slice(2);
  for (let i = 0; i < argv.length; i += 2) {
    if (!argv[i].startsWith("--") || argv[i + 1] === undefined) {
      fail(`bad arguments near ${argv[i]}`);
    }
    out[argv[i].slice(2)] = argv[i + 1];
  }
  return out;
}
