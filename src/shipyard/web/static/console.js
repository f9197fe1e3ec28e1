// The console's only script: local times, and the three changes, sent as JSON with the token.
"use strict";

function token() {
  const field = document.getElementById("token");
  if (field.value) sessionStorage.setItem("shipyard-token", field.value);
  return field.value || sessionStorage.getItem("shipyard-token") || "";
}

async function change(method, url, body, out) {
  const headers = { "Content-Type": "application/json" };
  const t = token();
  if (t) headers.Authorization = "Bearer " + t;
  const reply = await fetch(url, { method, headers, body: JSON.stringify(body) });
  const data = await reply.json().catch(() => ({ error: reply.statusText }));
  out.textContent = reply.ok ? "done: " + JSON.stringify(data) : "refused (" + reply.status + "): " + data.error;
  out.className = reply.ok ? "ok" : "error";
  return reply.ok;
}

document.addEventListener("DOMContentLoaded", () => {
  const saved = sessionStorage.getItem("shipyard-token");
  if (saved) document.getElementById("token").value = saved;
  for (const cell of document.querySelectorAll(".time[data-t]")) {
    const t = parseFloat(cell.dataset.t);
    if (t) cell.textContent = new Date(t * 1000).toLocaleString();
  }
  const move = document.getElementById("move-alias");
  if (move) move.addEventListener("submit", (event) => {
    event.preventDefault();
    const name = document.getElementById("alias-name").value;
    const expect = document.getElementById("alias-expect").value || null;
    change("PUT", "/api/aliases/" + encodeURIComponent(name),
      { target: move.dataset.target, expect }, document.getElementById("alias-result"));
  });
  for (const button of document.querySelectorAll("button.cancel")) {
    button.addEventListener("click", () => change("POST",
      "/api/scheduler/jobs/" + encodeURIComponent(button.dataset.job) + "/cancel", {},
      document.getElementById("cancel-result")));
  }
  for (const button of document.querySelectorAll("button.requeue")) {
    button.addEventListener("click", () => change("POST",
      "/api/queues/" + encodeURIComponent(button.dataset.queue) + "/requeue", { ids: null },
      document.getElementById("requeue-result")));
  }
});
