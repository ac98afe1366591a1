// toolgate approvals page: renders server-sent snapshots and posts
// decisions to the JSON API with the session's CSRF token.
"use strict";
(function () {
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  const pendingEl = document.getElementById("pending");
  const countEl = document.getElementById("pending-count");
  const histEl = document.querySelector("#history tbody");
  const connEl = document.getElementById("conn");
  let offset = 0; // server time minus local time, ms
  let snapshot = { pending: [], history: [] };
  const drafts = {}; // call id → typed text, kept across re-renders

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? "" : v);
    }
    for (const k of kids) if (k !== null && k !== undefined) e.append(k);
    return e;
  }

  function left(expires) {
    const ms = new Date(expires).getTime() - (Date.now() + offset);
    if (ms <= 0) return "expired";
    const s = Math.floor(ms / 1000);
    return (s >= 60 ? Math.floor(s / 60) + "m " : "") + (s % 60) + "s";
  }

  function pretty(args) {
    try { return JSON.stringify(args, null, 2); } catch (e) { return String(args); }
  }

  function diffView(text) {
    const pre = el("pre", { class: "diff" });
    for (const line of text.split("\n")) {
      let cls = "";
      if (line.startsWith("+") && !line.startsWith("+++")) cls = "add";
      else if (line.startsWith("-") && !line.startsWith("---")) cls = "del";
      else if (line.startsWith("@@")) cls = "hunk";
      pre.append(el("span", { class: cls }, line + "\n"));
    }
    return pre;
  }

  async function decide(id, verb, body, msgEl, buttons) {
    buttons.forEach(b => b.disabled = true);
    msgEl.className = "msg";
    msgEl.textContent = "sending…";
    try {
      const r = await fetch("/api/approvals/" + encodeURIComponent(id) + "/" + verb, {
        method: "POST", credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
        body: JSON.stringify(body),
      });
      const j = await r.json().catch(() => ({}));
      if (!r.ok) throw new Error(j.error || r.statusText);
      msgEl.textContent = j.status === "published" ? "sent; waiting for a worker" : j.status;
      delete drafts[id];
    } catch (e) {
      msgEl.className = "msg err";
      msgEl.textContent = e.message;
      buttons.forEach(b => b.disabled = false);
    }
  }

  function card(v) {
    const q = v.question;
    const dl = el("dl", { class: "meta" });
    const row = (k, val) => { if (val) dl.append(el("dt", {}, k), el("dd", {}, val)); };
    row("call", v.call_id);
    row("agent", v.agent);
    row("session", v.session_id);
    row("tool", v.tool);
    row("rule", v.rule);
    row("reason", v.reason);
    row("offending", v.offending);
    if (v.approvers > 1) row("approvals", (v.approved_by || []).length + " of " + v.approvers + ((v.approved_by || []).length ? " (" + v.approved_by.join(", ") + ")" : ""));
    const leftEl = el("span", { class: "left", "data-expires": v.expires_at }, left(v.expires_at));
    dl.append(el("dt", {}, "time left"), el("dd", {}, leftEl));

    const msg = el("span", { class: "msg" });
    const text = el("input", { type: "text", placeholder: q ? "answer" : "comment, or reason to reject", "aria-label": "comment or reason", value: drafts[v.call_id] || "" });
    text.addEventListener("input", () => drafts[v.call_id] = text.value);
    const acts = el("div", { class: "actions" });
    const buttons = [];
    if (q) {
      if (q.choices && q.choices.length) {
        for (const c of q.choices) {
          const b = el("button", { class: "approve", type: "button", onclick: () => decide(v.call_id, "answer", { answer: c }, msg, buttons) }, c);
          buttons.push(b);
        }
      } else {
        acts.append(text);
        buttons.push(el("button", { class: "approve", type: "button", onclick: () => {
          if (!text.value) { msg.className = "msg err"; msg.textContent = "type an answer"; return; }
          decide(v.call_id, "answer", { answer: text.value }, msg, buttons);
        } }, "Answer"));
      }
      buttons.push(el("button", { class: "reject", type: "button", onclick: () => {
        decide(v.call_id, "reject", { reason: text.value || "declined to answer" }, msg, buttons);
      } }, "Decline"));
    } else {
      acts.append(text);
      buttons.push(el("button", { class: "approve", type: "button", "data-action": "approve", onclick: () => decide(v.call_id, "approve", { comment: text.value }, msg, buttons) }, "Approve"));
      const scope = v.always_allow_scope || {};
      const scopeText = scope.command_prefix ? "commands starting “" + scope.command_prefix + "”" : scope.path_pattern ? "path " + scope.path_pattern : "this tool";
      buttons.push(el("button", { type: "button", "data-action": "always", title: "approve, and from now on allow " + v.agent + " " + v.tool + ": " + scopeText,
        onclick: () => decide(v.call_id, "approve", { comment: text.value, always_allow: scope.command_prefix || scope.path_pattern ? { command_prefix: scope.command_prefix || "", path_pattern: scope.path_pattern || "" } : true }, msg, buttons) },
        "Approve & always allow " + scopeText));
      buttons.push(el("button", { class: "reject", type: "button", "data-action": "reject", onclick: () => {
        if (!text.value.trim()) { msg.className = "msg err"; msg.textContent = "a rejection needs a reason: type it in the box"; text.focus(); return; }
        decide(v.call_id, "reject", { reason: text.value }, msg, buttons);
      } }, "Reject"));
    }
    acts.append(...buttons, msg);
    return el("div", { class: "card" + (q ? " question" : ""), "data-call-id": v.call_id },
      q ? el("p", {}, el("strong", {}, v.agent + " asks: "), q.question) : null,
      dl,
      el("pre", { class: "args" }, pretty(v.arguments)),
      v.diff ? diffView(v.diff) : null,
      q && q.default_answer ? el("p", { class: "msg" }, "default answer on timeout: " + q.default_answer) : null,
      acts);
  }

  function render() {
    const focused = document.activeElement && document.activeElement.closest && document.activeElement.closest(".card");
    const focusID = focused ? focused.getAttribute("data-call-id") : null;
    countEl.textContent = snapshot.pending.length;
    pendingEl.replaceChildren(...(snapshot.pending.length ? snapshot.pending.map(card) : [el("p", { class: "empty" }, "Nothing waits for a decision.")]));
    if (focusID) {
      const input = pendingEl.querySelector('[data-call-id="' + CSS.escape(focusID) + '"] input');
      if (input) { input.focus(); input.setSelectionRange(input.value.length, input.value.length); }
    }
    histEl.replaceChildren(...snapshot.history.map(v => {
      const o = v.outcome || {};
      return el("tr", { "data-call-id": v.call_id },
        el("td", {}, v.call_id), el("td", {}, v.agent), el("td", {}, v.tool),
        el("td", { class: "status" }, o.default_answer ? "answered (default)" : v.status),
        el("td", {}, (o.approvers || []).join(", ")),
        el("td", {}, o.answer ? "answer: " + o.answer : (o.reason || o.comment || "")),
        el("td", {}, o.decided_at ? new Date(o.decided_at).toLocaleString() : ""));
    }));
  }

  setInterval(() => {
    for (const e of document.querySelectorAll("[data-expires]")) {
      const t = left(e.getAttribute("data-expires"));
      e.textContent = t;
      e.classList.toggle("soon", t === "expired" || !t.includes("m"));
    }
  }, 1000);

  const es = new EventSource("/events");
  es.addEventListener("snapshot", ev => {
    snapshot = JSON.parse(ev.data);
    offset = new Date(snapshot.server_time).getTime() - Date.now();
    connEl.textContent = "live";
    render();
  });
  es.onerror = () => { connEl.textContent = "reconnecting…"; };
})();
