// Preloaded into node (NODE_OPTIONS=--require) by the deployment audit test:
// the one host name in BYORELAY_AUDIT_HOST resolves to BYORELAY_AUDIT_ADDRESS,
// as a DNS record pointing the name at the edge would. Everything else
// resolves as usual. No file on the machine changes, and only this process
// (and the node processes it starts) sees the name.
//
// fetch (undici), https and tls all reach dns.lookup through the module
// object at call time, so replacing the property covers every probe.
"use strict";
const dns = require("node:dns");

const host = process.env.BYORELAY_AUDIT_HOST;
const address = process.env.BYORELAY_AUDIT_ADDRESS;
const lookup = dns.lookup;

if (host && address) {
  dns.lookup = function pinned(name, options, callback) {
    if (typeof options === "function") {
      callback = options;
      options = {};
    } else if (typeof options === "number") {
      options = { family: options };
    }
    if (String(name).toLowerCase() !== host) {
      return lookup.call(this, name, options, callback);
    }
    const family = address.includes(":") ? 6 : 4;
    if (options && options.all) {
      process.nextTick(callback, null, [{ address, family }]);
    } else {
      process.nextTick(callback, null, address, family);
    }
    return {};
  };
}
