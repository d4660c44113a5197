"use strict";
// Fills the operator's commands in with the code as the person types it.
// Nothing leaves the page.
(function () {
  const input = document.getElementById("code");
  const status = document.getElementById("code-status");
  const out = document.getElementById("commands");
  const shape = /^[0-9A-HJKMNP-TV-Z]{4}-[0-9A-HJKMNP-TV-Z]{4}$/;
  function render() {
    const raw = input.value.trim().toUpperCase();
    const code = raw === "" ? "XXXX-XXXX" : raw;
    status.textContent = raw === "" || shape.test(raw) ? "" : "a code is eight letters and digits, like K7TZ-9F2Q";
    status.className = "status err";
    out.textContent =
      "export BYORELAY_ADMIN_URL=" + location.origin + "/admin\n" +
      "go run ./cmd/byorelay admin pairing " + code + "                 # shows the device's fingerprint\n" +
      "go run ./cmd/byorelay admin approve " + code + " --owner <the person it runs for>";
  }
  input.addEventListener("input", render);
  document.getElementById("code-form").addEventListener("submit", (e) => e.preventDefault());
  const code = new URLSearchParams(location.search).get("code");
  if (code) input.value = code;
  render();
})();
