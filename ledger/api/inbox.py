"""`GET /inbox`: the page where a person decides planned actions (DESIGN 14).

It lists every PROPOSED plan the person may SELECT (their own proposals included), with the tool, the
input and the preview, and a Confirm and a Reject button on each; the decisions are the GraphQL mutations
`plannedActions { confirmPlannedAction rejectPlannedAction }`, sent to this server's /graphql.

- It is served by the ledger, whole: no asset comes from anywhere else, so it works offline.
- It takes the person's token as GraphiQL does: `/inbox#token=...` (the fragment never reaches a server),
  then kept in the browser's local storage under the same key.
- Model-written text (a plan's input and preview, a reason, an error) is only ever set as `textContent`,
  never parsed as HTML. The Content-Security-Policy makes that a rule of the browser as well: only this
  page's own script and style run (by hash), nothing may be loaded, and no page may frame it
  (`frame-ancestors 'none'`, against clickjacking a Confirm button).
"""

from __future__ import annotations

import base64
import hashlib

from starlette.responses import HTMLResponse

_STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 0; background: #f6f7f9; color: #1d232b; }
header { background: #1d232b; color: #fff; padding: 12px 24px; display: flex; gap: 16px; align-items: center; }
header h1 { font-size: 18px; margin: 0; flex: 1; }
main { max-width: 980px; margin: 0 auto; padding: 16px 24px; }
.plan { background: #fff; border: 1px solid #d8dde3; border-radius: 8px; padding: 14px 16px; margin: 12px 0; }
.plan h2 { font-size: 16px; margin: 0 0 6px; }
.meta { color: #5b6673; font-size: 13px; margin-bottom: 8px; }
pre { background: #f0f2f5; padding: 8px; border-radius: 6px; overflow: auto; white-space: pre-wrap;
      word-break: break-word; margin: 4px 0 10px; }
.label { font-weight: 600; font-size: 13px; }
.failed { color: #a4161a; } .succeeded { color: #1b6b36; }
.actions { display: flex; gap: 8px; align-items: center; }
button { font: inherit; padding: 5px 14px; border-radius: 6px; border: 1px solid #8a96a3; cursor: pointer; }
button.confirm { background: #1b6b36; color: #fff; border-color: #1b6b36; }
button.reject { background: #fff; color: #a4161a; border-color: #a4161a; }
input.reason { flex: 1; font: inherit; padding: 4px 8px; }
.outcome { margin-top: 8px; font-size: 14px; }
#status { margin: 8px 0; } .error { color: #a4161a; white-space: pre-wrap; }
"""

_SCRIPT = r"""
"use strict";
const KEY = "ledger-token";
const PLANS = `query Inbox { plannedActions { plannedActions(status: PROPOSED, first: 500) {
  id actionId actionVersion input preview clientId mcpServerId proposedByExecutionId expiresAt createdAt
  action { name tool { name description } } } } }`;
const CONFIRM = `mutation Confirm($id: UUID!) { plannedActions { confirmPlannedAction(id: $id) {
  id status executionId } } }`;
const REJECT = `mutation Reject($id: UUID!, $reason: String) { plannedActions {
  rejectPlannedAction(id: $id, reason: $reason) { id status reason } } }`;

function token() {
  const params = new URLSearchParams(window.location.hash.slice(1));
  if (params.get("token")) {
    window.localStorage.setItem(KEY, params.get("token"));
    history.replaceState(null, "", window.location.pathname);
  }
  return window.localStorage.getItem(KEY) || "";
}

// Every piece of text reaches the page through here: textContent, never HTML.
function el(tag, text, className) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (className) node.className = className;
  return node;
}

function json(value) { return JSON.stringify(value, null, 2); }

async function graphql(query, variables) {
  const response = await fetch("/graphql", {
    method: "POST",
    headers: { "Content-Type": "application/json", "Authorization": "Bearer " + token() },
    body: JSON.stringify({ query, variables: variables || {} }),
  });
  const body = await response.json();
  if (body.errors && body.errors.length) {
    const error = body.errors[0];
    const ext = error.extensions || {};
    throw new Error((ext.code ? ext.code + ": " : "") + error.message + (ext.hint ? "\nhint: " + ext.hint : ""));
  }
  return body.data;
}

function say(text, isError) {
  const status = document.getElementById("status");
  status.textContent = text;
  status.className = isError ? "error" : "";
}

function card(plan) {
  const node = el("section", null, "plan");
  node.dataset.planId = plan.id;
  const name = plan.action ? (plan.action.tool ? plan.action.tool.name : plan.action.name) : plan.actionId;
  node.appendChild(el("h2", name + " (version " + plan.actionVersion + ")"));
  const through = plan.mcpServerId ? " through MCP server " + plan.mcpServerId : "";
  node.appendChild(el("div", "proposed by client " + plan.clientId + through + " at " + plan.createdAt +
                      "; expires at " + plan.expiresAt, "meta"));
  node.appendChild(el("div", "Input", "label"));
  node.appendChild(el("pre", json(plan.input), "input"));
  const preview = plan.preview || {};
  node.appendChild(el("div", "Preview: " + preview.status, "label " + String(preview.status).toLowerCase()));
  node.appendChild(el("pre", json(preview.status === "SUCCEEDED" ? preview.output : preview.error), "preview"));
  const actions = el("div", null, "actions");
  const confirm = el("button", "Confirm", "confirm");
  const reason = el("input", null, "reason");
  reason.placeholder = "reason (for a reject)";
  const reject = el("button", "Reject", "reject");
  actions.append(confirm, reason, reject);
  node.appendChild(actions);
  const outcome = el("div", null, "outcome");
  node.appendChild(outcome);
  const decide = async (query, variables, field) => {
    confirm.disabled = reject.disabled = true;
    try {
      const data = await graphql(query, variables);
      const decided = data.plannedActions[field];
      outcome.className = "outcome succeeded";
      outcome.textContent = decided.status + (decided.executionId ? ": started execution " + decided.executionId : "")
        + (decided.reason ? ": " + decided.reason : "");
      node.dataset.status = decided.status;
    } catch (error) {
      outcome.className = "outcome error";
      outcome.textContent = error.message;
      confirm.disabled = reject.disabled = false;
    }
  };
  confirm.addEventListener("click", () => decide(CONFIRM, { id: plan.id }, "confirmPlannedAction"));
  reject.addEventListener("click", () => decide(REJECT, { id: plan.id, reason: reason.value || null },
                                                "rejectPlannedAction"));
  return node;
}

async function load() {
  const list = document.getElementById("plans");
  if (!token()) {
    say("No token: open /inbox#token=<your token>, or paste one above.", true);
    return;
  }
  say("Loading...");
  try {
    const plans = (await graphql(PLANS)).plannedActions.plannedActions;
    list.replaceChildren(...plans.map(card));
    say(plans.length ? plans.length + " plan(s) wait for a decision." : "Nothing waits for a decision.");
  } catch (error) {
    say(error.message, true);
  }
}

document.getElementById("use-token").addEventListener("click", () => {
  const field = document.getElementById("token");
  if (field.value) window.localStorage.setItem(KEY, field.value.trim());
  field.value = "";
  load();
});
document.getElementById("reload").addEventListener("click", load);
load();
"""


def _sha256(source: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode() + "'"


_PAGE = f"""<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8" />
  <meta name="viewport" content="width=device-width, initial-scale=1" />
  <title>Ledger inbox</title>
  <style>{_STYLE}</style>
</head>
<body>
  <header>
    <h1>Planned actions waiting for a decision</h1>
    <input id="token" type="password" placeholder="token" autocomplete="off" />
    <button id="use-token">Use token</button>
    <button id="reload">Reload</button>
  </header>
  <main>
    <div id="status"></div>
    <div id="plans"></div>
  </main>
  <script>{_SCRIPT}</script>
</body>
</html>
"""

CONTENT_SECURITY_POLICY = (f"default-src 'none'; script-src {_sha256(_SCRIPT)}; style-src {_sha256(_STYLE)}; "
                           "connect-src 'self'; img-src 'none'; base-uri 'none'; form-action 'none'; "
                           "frame-ancestors 'none'")


def inbox_response() -> HTMLResponse:
    return HTMLResponse(_PAGE, headers={"Content-Security-Policy": CONTENT_SECURITY_POLICY,
                                        "X-Frame-Options": "DENY", "Referrer-Policy": "no-referrer",
                                        "Cache-Control": "no-store"})
