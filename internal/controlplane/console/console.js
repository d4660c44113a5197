"use strict";
// The operator console. It holds no data of its own: every read and every
// change is an admin API call carrying the token as a bearer header, which
// is what the local stack's guard checks (never a cookie, so no other page
// can make this browser act for the operator).
(function () {
  const $ = (id) => document.getElementById(id);
  const tokenKey = "byorelay-admin-token";
  let token = "";
  let current = null; // the pending pairing on screen
  let listed = ""; // what the pending list shows, to redraw only on change
  let skew = 0; // the control plane's clock minus this browser's, in ms
  let listing = false; // a list request is in flight
  let refused = false; // the token was refused: stop polling until a new one
  let listFailed = false; // the status line shows a failed list, not a decision

  function say(el, text, ok) {
    el.textContent = text;
    el.className = "status " + (ok ? "ok" : "err");
  }

  // The page's state, kept on <body data-state>:
  //   needs-token  no token: the token panel says where to find it, and
  //                nothing else shows (one place, not a line in every table);
  //   loading      a token, no answer yet: the tables say "loading…";
  //   ready        the admin API accepted the token;
  //   refused      it did not: back to the token panel, saying so.
  // Without this a page with a token would show "enter the token" in its
  // tables until the first answer, and one without would show empty tables.
  function setState(state) {
    document.body.dataset.state = state;
    const locked = state === "needs-token" || state === "refused";
    $("needs-token").hidden = !locked;
    $("console").hidden = locked;
    if (state === "needs-token") $("auth-status").textContent = "";
    if (state === "loading") {
      say($("auth-status"), "checking the token…", true);
      for (const [id, span] of [["pending", 8], ["devices", 5], ["consents", 4]]) {
        const body = $(id);
        body.replaceChildren();
        const td = cell(body.insertRow(), "loading…");
        td.colSpan = span;
        td.className = "muted";
      }
    }
    if (state === "ready") say($("auth-status"), "token accepted", true);
    if (state === "refused") {
      say($("auth-status"), "the token was refused: the stack makes a new one every run; open the admin console link of the make run now running, or paste its token", false);
    }
  }

  // An answer from the admin API: the token is good.
  function accepted() {
    if (document.body.dataset.state !== "ready") setState("ready");
  }

  // A 401: the token is not this run's. Polling stops until a new one.
  function refuse() {
    refused = true;
    setState("refused");
  }

  async function api(method, path, body) {
    const init = { method, credentials: "omit", cache: "no-store", headers: { Authorization: "Bearer " + token } };
    if (body !== undefined) {
      init.headers["Content-Type"] = "application/json";
      init.body = JSON.stringify(body);
    }
    const resp = await fetch("/admin" + path, init);
    const text = await resp.text();
    let data;
    try { data = JSON.parse(text); } catch (e) { data = { message: text }; }
    if (!resp.ok) {
      const err = new Error(data.message || text || String(resp.status));
      err.status = resp.status;
      throw err;
    }
    return data;
  }

  // The key id the daemon prints: BYOLLM- and 24 Crockford base32 digits
  // of SHA-256 over the raw identity key, in groups of four.
  async function keyID(identityB64) {
    const std = identityB64.replace(/-/g, "+").replace(/_/g, "/");
    const raw = Uint8Array.from(atob(std + "===".slice((std.length + 3) % 4)), (c) => c.charCodeAt(0));
    const sum = new Uint8Array(await crypto.subtle.digest("SHA-256", raw));
    const alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";
    let bits = 0, value = 0, out = "";
    for (const b of sum.slice(0, 15)) {
      value = (value << 8) | b;
      bits += 8;
      while (bits >= 5) {
        out += alphabet[(value >>> (bits - 5)) & 31];
        bits -= 5;
      }
    }
    return "BYOLLM-" + out.match(/.{4}/g).join("-");
  }

  function cell(row, text) {
    const td = document.createElement("td");
    td.textContent = text;
    row.appendChild(td);
    return td;
  }

  function button(td, label, danger, action) {
    const b = document.createElement("button");
    b.type = "button";
    b.textContent = label;
    b.className = danger ? "danger small" : "small";
    b.addEventListener("click", action);
    td.appendChild(b);
    td.appendChild(document.createTextNode(" "));
    return b;
  }

  async function refresh() {
    const status = $("projection-status");
    let f;
    try {
      f = await api("GET", "/fixture");
    } catch (e) {
      if (e.status === 401) refuse();
      else say(status, e.message, false);
      return;
    }
    accepted();
    status.textContent = "";
    const devices = $("devices");
    devices.replaceChildren();
    for (const d of f.devices) {
      const row = devices.insertRow();
      cell(row, d.runnerId);
      cell(row, d.owner);
      const kid = cell(row, "");
      kid.appendChild(document.createElement("code")).textContent = await keyID(d.device.identity);
      cell(row, d.revoked ? "revoked" : "approved");
      const act = cell(row, "");
      if (!d.revoked) {
        button(act, "Revoke", true, async () => {
          if (!confirm("Revoke " + d.runnerId + "? Its next request is refused.")) return;
          await change(() => api("POST", "/devices/" + encodeURIComponent(d.runnerId) + "/revoke"), "revoked " + d.runnerId);
        });
      }
    }
    if (f.devices.length === 0) cell(devices.insertRow(), "no devices yet").colSpan = 5;

    const revoked = new Set(f.revoked.map((r) => r.owner + "\u0000" + r.siteId));
    const consents = $("consents");
    consents.replaceChildren();
    const owners = new Set();
    for (const c of f.consents) {
      owners.add(c.owner);
      const row = consents.insertRow();
      cell(row, c.owner);
      cell(row, c.siteId);
      const isRevoked = revoked.has(c.owner + "\u0000" + c.siteId);
      cell(row, isRevoked ? "revoked" : c.paused ? "paused" : "active");
      const act = cell(row, "");
      const body = { owner: c.owner, siteId: c.siteId };
      if (!isRevoked) {
        const verb = c.paused ? "resume" : "pause";
        button(act, c.paused ? "Resume" : "Pause", false, () => change(() => api("POST", "/consents/" + verb, body), verb + "d " + c.owner + " → " + c.siteId));
        button(act, "Revoke", true, () => change(() => api("POST", "/consents/revoke", body), "revoked " + c.owner + " → " + c.siteId));
      }
    }
    if (f.consents.length === 0) cell(consents.insertRow(), "no consents yet").colSpan = 4;
    for (const d of f.devices) owners.add(d.owner);
    const list = $("owners");
    list.replaceChildren();
    for (const o of owners) list.appendChild(document.createElement("option")).value = o;
    if ($("owner").value === "" && owners.size > 0) $("owner").value = [...owners][0];
    if ($("list-owner").value === "" && owners.size > 0) $("list-owner").value = [...owners][0];
  }

  function expiresIn(expiresAt) {
    const left = Math.floor((expiresAt - (Date.now() + skew)) / 1000);
    if (left <= 0) return "expired";
    return Math.floor(left / 60) + " min " + String(left % 60).padStart(2, "0") + " s";
  }

  function tick() {
    for (const td of document.querySelectorAll("#pending td[data-expires]")) {
      td.textContent = expiresIn(Number(td.dataset.expires));
    }
  }

  // The pending pairings, newest first. Redrawn only when the list changed,
  // so a button is not replaced under the pointer between two polls.
  async function refreshPending() {
    if (listing || refused || token === "") return;
    listing = true;
    let data;
    try {
      data = await api("GET", "/pairings/pending");
    } catch (e) {
      if (e.status === 401) {
        refuse();
        return;
      }
      listFailed = true;
      say($("pending-status"), e.message, false);
      return;
    } finally {
      listing = false;
    }
    accepted();
    if (listFailed) {
      listFailed = false;
      $("pending-status").textContent = "";
    }
    skew = data.now - Date.now();
    const seen = JSON.stringify([data.more, data.pairings.map((p) => [p.userCode, p.approvedAs || ""])]);
    if (seen !== listed) {
      listed = seen;
      const body = $("pending");
      body.replaceChildren();
      for (const p of data.pairings) {
        const row = body.insertRow();
        row.dataset.code = p.userCode;
        cell(row, "").appendChild(document.createElement("strong")).textContent = p.userCode;
        cell(row, p.label || "(no label)");
        cell(row, p.platform || "(not given)");
        cell(row, p.daemonVersion || "(not given)");
        cell(row, p.capabilities.map((c) => c.kind).join(", ") || "(nothing advertised)");
        cell(row, "").appendChild(document.createElement("code")).textContent = p.fingerprint;
        cell(row, "").dataset.expires = String(p.expiresAt);
        const act = cell(row, "");
        if (p.approvedAs) {
          act.textContent = "approved as " + p.approvedAs + "; waiting for the device's next poll";
          continue;
        }
        button(act, "Approve", false, () => decideListed(p, true)).classList.add("approve");
        button(act, "Deny", true, () => decideListed(p, false)).classList.add("deny");
      }
      if (data.pairings.length === 0) cell(body.insertRow(), "no device is asking to pair").colSpan = 8;
      if (data.more) {
        cell(body.insertRow(), "more are pending than shown: find one by its code below").colSpan = 8;
      }
    }
    tick();
  }

  async function decideListed(p, approve) {
    const status = $("pending-status");
    listFailed = false; // what this says next is the decision's
    try {
      if (approve) {
        const owner = $("list-owner").value.trim();
        if (owner === "") {
          say(status, "name the owner this device runs for", false);
          return;
        }
        const d = await api("POST", "/pairings/approve", { userCode: p.userCode, owner });
        say(status, "approved: " + p.userCode + " is runner " + d.device.runnerId + " of " + owner + "; the device finishes pairing on its next poll", true);
      } else {
        await api("POST", "/pairings/deny", { userCode: p.userCode });
        say(status, "denied: " + p.userCode + " no longer resolves; the device reports it expired", true);
      }
    } catch (e) {
      say(status, e.message, false);
    }
    await refreshPending();
    await refresh();
  }

  async function change(call, done) {
    const status = $("projection-status");
    try {
      await call();
      say(status, done, true);
    } catch (e) {
      say(status, e.message, false);
    }
    await refresh();
  }

  async function lookup() {
    const code = $("code").value.trim().toUpperCase();
    const status = $("code-status");
    $("pairing").hidden = true;
    $("pairing-status").textContent = "";
    current = null;
    if (code === "") {
      say(status, "enter the code the device shows", false);
      return;
    }
    try {
      const p = await api("GET", "/pairings/" + encodeURIComponent(code));
      current = p;
      $("p-code").textContent = p.userCode;
      $("p-label").textContent = p.label || "(no label)";
      $("p-platform").textContent = p.platform || "(not given)";
      $("p-version").textContent = p.daemonVersion || "(not given)";
      $("p-fingerprint").textContent = p.fingerprint;
      $("p-capabilities").textContent = p.capabilities.map((c) => c.kind).join(", ") || "(nothing advertised)";
      $("p-expires").textContent = new Date(p.expiresAt).toLocaleTimeString();
      $("pairing").hidden = false;
      say(status, "pending", true);
    } catch (e) {
      say(status, e.status === 404 ? "no pending pairing has this code (unknown, expired or already decided)" : e.message, false);
    }
  }

  async function decide(approve) {
    if (current === null) return;
    const status = $("pairing-status");
    try {
      if (approve) {
        const owner = $("owner").value.trim();
        if (owner === "") {
          say(status, "name the owner this device runs for", false);
          return;
        }
        const d = await api("POST", "/pairings/approve", { userCode: current.userCode, owner });
        say(status, "approved: " + current.userCode + " is runner " + d.device.runnerId + " of " + owner + "; the device finishes pairing on its next poll", true);
      } else {
        await api("POST", "/pairings/deny", { userCode: current.userCode });
        say(status, "denied: " + current.userCode + " no longer resolves; the device reports it expired", true);
      }
      $("pairing").hidden = true;
      $("code-status").textContent = "";
      current = null;
    } catch (e) {
      say(status, e.message, false);
    }
    await refreshPending();
    await refresh();
  }

  // One person's view (GET /admin/people/{owner}): their mappings, with
  // an unmap button each; their queued jobs whose slot nobody mapped, with
  // the live services that could answer; and every service their own and
  // their teammates' devices advertise, with a button that maps it for the
  // site and purpose chosen above the table.
  async function showPerson() {
    const owner = $("person").value.trim();
    const status = $("person-status");
    if (owner === "") {
      say(status, "name the person", false);
      return;
    }
    let v;
    try {
      v = await api("GET", "/people/" + encodeURIComponent(owner));
    } catch (e) {
      if (e.status === 401) refuse();
      else say(status, e.message, false);
      return;
    }
    accepted();
    $("person-view").hidden = false;
    status.textContent = "";
    const mappings = $("person-mappings");
    const waiting = $("person-waiting");
    const services = $("person-services");
    const sites = $("person-site");
    mappings.replaceChildren();
    waiting.replaceChildren();
    services.replaceChildren();
    sites.replaceChildren();
    for (const site of v.sites) {
      const opt = document.createElement("option");
      opt.value = opt.textContent = site.siteId;
      sites.appendChild(opt);
      if (site.mappings.length === 0) {
        const row = mappings.insertRow();
        cell(row, site.siteId + (site.paused ? " (paused)" : ""));
        const td = cell(row, "no mappings: every job of this site is unmapped");
        td.colSpan = 5;
        td.className = "muted";
      }
      for (const m of site.mappings) {
        const row = mappings.insertRow();
        cell(row, site.siteId + (site.paused ? " (paused)" : ""));
        cell(row, m.purpose);
        cell(row, m.kind);
        cell(row, m.service);
        cell(row, m.owner || owner);
        button(cell(row, ""), "Unmap", true, () => change(status, "POST", "/mappings/delete",
          { owner, siteId: site.siteId, purpose: m.purpose, kind: m.kind }, "unmapped " + m.purpose + " / " + m.kind));
      }
      for (const j of site.waiting) {
        const row = waiting.insertRow();
        cell(row, site.siteId);
        cell(row, j.jobId);
        cell(row, j.purpose);
        cell(row, j.kind);
        cell(row, j.candidates.map((c) => c.service + " of " + c.owner).join(", ") || "nothing live advertises " + j.kind);
      }
      if (site.moreWaiting) {
        const td = cell(waiting.insertRow(), "more queued jobs than are listed");
        td.colSpan = 5;
        td.className = "muted";
      }
    }
    if (waiting.rows.length === 0) {
      const td = cell(waiting.insertRow(), "none");
      td.colSpan = 5;
      td.className = "muted";
    }
    for (const svc of v.services) {
      const row = services.insertRow();
      cell(row, svc.service);
      cell(row, svc.kind);
      cell(row, svc.owner);
      cell(row, svc.runnerId);
      cell(row, svc.offerScope);
      cell(row, svc.live ? "live" : "not lately");
      button(cell(row, ""), "Map", false, () => {
        const purpose = $("person-purpose").value.trim();
        const req = { owner, siteId: sites.value, kind: svc.kind, service: svc.service };
        if (purpose !== "") req.purpose = purpose;
        if (svc.owner !== owner) req.serviceOwner = svc.owner;
        change(status, "POST", "/mappings", req, "mapped " + (purpose || "default") + " / " + svc.kind + " to " + svc.service + " of " + svc.owner);
      });
    }
    if (services.rows.length === 0) {
      const td = cell(services.insertRow(), "no device of this person or their teammates has advertised a service");
      td.colSpan = 7;
      td.className = "muted";
    }
  }

  async function change(status, method, path, body, done) {
    try {
      await api(method, path, body);
      await showPerson();
      say(status, done, true);
    } catch (e) {
      say(status, e.message, false);
    }
  }

  // A token in the fragment (the link serve prints) never reaches a
  // server or a log; keep it, then take it out of the address bar.
  function tokenFromFragment() {
    const m = location.hash.match(/token=([A-Za-z0-9_-]+)/);
    if (!m) return false;
    localStorage.setItem(tokenKey, m[1]);
    history.replaceState(null, "", location.pathname + location.search);
    return true;
  }

  function start() {
    tokenFromFragment();
    token = localStorage.getItem(tokenKey) || "";
    $("token").value = token;
    const code = new URLSearchParams(location.search).get("code");
    if (code) $("code").value = code;

    $("token-form").addEventListener("submit", (e) => {
      e.preventDefault();
      token = $("token").value.trim();
      localStorage.setItem(tokenKey, token);
      listed = "";
      refused = false;
      if (token === "") {
        setState("needs-token");
        return;
      }
      setState("loading");
      refresh();
      refreshPending();
    });
    // The banner's link opened in the tab that shows this page already
    // (the daemon's URL, asking for the token) changes only the fragment,
    // which loads nothing: take the token from it here.
    window.addEventListener("hashchange", () => {
      if (!tokenFromFragment()) return;
      token = localStorage.getItem(tokenKey) || "";
      $("token").value = token;
      listed = "";
      refused = false;
      setState("loading");
      refresh();
      refreshPending();
    });
    $("code-form").addEventListener("submit", (e) => { e.preventDefault(); lookup(); });
    $("decide-form").addEventListener("submit", (e) => { e.preventDefault(); decide(true); });
    $("deny").addEventListener("click", () => decide(false));
    $("refresh").addEventListener("click", refresh);
    $("person-form").addEventListener("submit", (e) => { e.preventDefault(); showPerson(); });
    $("refresh-pending").addEventListener("click", () => { listed = ""; refreshPending(); });
    if (token === "") {
      setState("needs-token");
      $("token").focus();
    } else {
      setState("loading");
      refresh();
      refreshPending();
      if (code) lookup();
    }
    // A daemon that starts pairing shows up without a click; a hidden tab
    // asks nothing.
    setInterval(() => { if (!document.hidden) refreshPending(); }, 3000);
    setInterval(tick, 1000);
  }
  start();
})();
