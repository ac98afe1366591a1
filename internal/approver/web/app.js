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
  const edits = {}; // call id → { open, text }: the arguments editor, kept across re-renders

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
    return (s >= 60 ? Math.floor(s / 60) + "m " : "") + (s % 60) + "s left";
  }

  // One date format everywhere: local "YYYY-MM-DD HH:MM:SS"; the title
  // holds the exact UTC time.
  function fmtTime(iso) {
    const d = new Date(iso);
    if (!iso || isNaN(d.getTime()) || d.getFullYear() < 2000) return "";
    const p = n => String(n).padStart(2, "0");
    return d.getFullYear() + "-" + p(d.getMonth() + 1) + "-" + p(d.getDate()) + " " +
      p(d.getHours()) + ":" + p(d.getMinutes()) + ":" + p(d.getSeconds());
  }

  function timeEl(iso, cls) {
    return el("time", { class: cls || "", datetime: iso, title: new Date(iso).toISOString() }, fmtTime(iso));
  }

  function ago(iso) {
    const s = Math.max(0, Math.floor((Date.now() + offset - new Date(iso).getTime()) / 1000));
    if (s < 60) return s + "s ago";
    if (s < 3600) return Math.floor(s / 60) + "m ago";
    return Math.floor(s / 3600) + "h " + Math.floor(s % 3600 / 60) + "m ago";
  }

  // toolDisplay says, by tool name and alias, which argument of a built-in
  // tool is its command line and which ones the diff shows; the server
  // makes it from the tools' definitions.
  const toolDisplay = JSON.parse(document.querySelector('meta[name="tool-display"]').content || "{}");

  // argsView shows the arguments as a person reads them: strings as they
  // are (no JSON escapes), the command of a shell call first, and the
  // content of a write or edit left to the diff below.
  function argsView(v) {
    let a = v.arguments;
    if (a === null || typeof a !== "object" || Array.isArray(a)) {
      return el("pre", { class: "args" }, JSON.stringify(a, null, 2));
    }
    const disp = Object.prototype.hasOwnProperty.call(toolDisplay, v.tool) ? toolDisplay[v.tool] : {};
    const hide = v.diff && disp.in_diff ? disp.in_diff : [];
    const pre = el("pre", { class: "args" });
    if (disp.command && typeof a[disp.command] === "string") {
      pre.append(el("span", { class: "cmd" }, "$ " + a[disp.command] + "\n"));
      a = Object.assign({}, a);
      delete a[disp.command];
    }
    for (const [k, val] of Object.entries(a)) {
      if (hide.includes(k)) continue;
      const text = typeof val === "string" ? val : JSON.stringify(val);
      pre.append(el("span", { class: "key" }, k + ":"), text.includes("\n") ? "\n" + text.replace(/^/gm, "  ") + "\n" : " " + text + "\n");
    }
    if (hide.some(k => k in v.arguments)) pre.append(el("span", { class: "note" }, "(the change is the diff below)\n"));
    return pre;
  }

  function diffView(text) {
    const pre = el("pre", { class: "diff" });
    for (const line of text.replace(/\n$/, "").split("\n")) {
      let cls = "ctx";
      if (line.startsWith("+++") || line.startsWith("---")) cls = "file";
      else if (line.startsWith("+")) cls = "add";
      else if (line.startsWith("-")) cls = "del";
      else if (line.startsWith("@@")) cls = "hunk";
      else if (line.startsWith("\\")) cls = "note";
      pre.append(el("span", { class: cls }, line || " ")); // a block each: one line
    }
    return pre;
  }

  // What a shell finding means, for a person.
  const findings = {
    parse: "the command line cannot be parsed",
    dynamic_command: "which program runs is only known when it runs",
    expansion: "an argument is only known when the command runs",
    glob: "an unquoted * or {a,b} could expand to file names that act as options",
    eval: "it runs code held in a string or a file",
    function: "it defines a shell function, which can hide a command",
    environment: "it sets an environment variable that changes what runs",
    arithmetic: "it does arithmetic on variables, which bash can turn into commands",
    script: "it runs a script the policy cannot see",
    executes: "one of its options makes it run other programs",
    writes: "one of its options makes it write files",
    reads: "it reads files named inside program text",
    follows_symlinks: "it follows symbolic links out of the directory tree",
    stdin_arguments: "it takes its arguments from standard input",
    program: "the program is named by a path that is not the system's program of that name",
    cwd: "it changes into a directory outside the workspace",
    network: "it reaches the network",
  };

  // explain turns the id of the rule that asked into plain words.
  function explain(rule, tool) {
    let r = rule || "", who = "";
    const ov = r.match(/^agents\.(.+?)\.((?:default|enabled|allow|ask|deny|exec|tools|kinds|constraints)\b.*)$/);
    if (ov) { who = "For agents matching “" + ov[1] + "”, "; r = ov[2]; }
    let m, text;
    if (!r) text = "the policy asks a person about this call";
    else if (r === "default" || r === "tools.default") text = "no rule of the policy names this tool, and the policy's default is to ask a person";
    else if ((m = r.match(/^(allow|ask|deny)\[\d+\]$/))) text = "the policy's " + m[1] + " list names this tool";
    else if ((m = r.match(/^tools\.([^.]+)\.(action|enabled)$/))) text = "the policy's rule for " + m[1] + " asks a person before every call of it";
    else if ((m = r.match(/^tools\.([^.]+)\.auto_execute$/))) text = "the policy's rule for " + m[1] + " does not let it run without a person";
    else if ((m = r.match(/^kinds\.([^.]+)/))) text = "the policy asks a person about every " + m[1] + " tool";
    else if (/(^|\.)security$/.test(r)) text = "the command is neither on the policy's whitelist nor one of its safe programs";
    else if (/(^|\.)confirm_dangerous$/.test(r)) text = "the command changes things (rm, mv, curl, git push, ...), and the policy has such commands confirmed by a person";
    else if (/(^|\.)ask$/.test(r)) text = "the policy asks a person about every command";
    else if ((m = r.match(/\.(whitelist|blacklist|safe_bins|dangerous_whitelist)\[\d+\]$/))) text = "a " + m[1].replace("_", " ") + " pattern of the policy matched";
    else if (r === "builtin.workspace") text = "it touches a path outside the workspace and the paths the policy allows";
    else if (r === "builtin.hard_link") text = "the file has other names (hard links), which may be protected paths";
    else if (r.startsWith("builtin.protected_paths")) text = "it writes git's configuration or hooks, which can make git run programs later";
    else if (r === "builtin.ask_mode") text = "no worker offers this tool, and the policy sends unknown tools to a person";
    else if (r === "builtin.fail_closed") text = "the policy could not judge the call, so a person decides";
    else if (r === "builtin.classify.dangerous") text = "the command changes things (rm, mv, curl, git push, ...), and the built-in policy has a person confirm such commands";
    else if (r === "builtin.classify.unclassified") text = "the built-in policy does not know this command, so a person decides";
    else if ((m = r.match(/^builtin\.classify\.(.+)$/))) text = "the built-in classification of shell commands counts it among " + m[1].replace(/_/g, " ") + " commands";
    else if ((m = r.match(/^builtin\.shell\.(.+)$/))) text = findings[m[1]] || "the shell analysis found " + m[1].replace(/_/g, " ");
    else if ((m = r.match(/^amendments\[/))) text = "an always-allow grant applies";
    else text = "the policy rule " + r + " asks a person";
    text = text + ".";
    return who ? who + text : text.charAt(0).toUpperCase() + text.slice(1);
  }

  function whyView(v) {
    return el("div", { class: "why" },
      el("span", { class: "plain" }, explain(v.rule, v.tool)), " ",
      v.rule ? el("code", { class: "rule", title: "the rule that asked" }, v.rule) : null,
      // The reason, unless it only repeats the rule ("tool write: ask by tools.write.action").
      v.reason && !/^tool \S+: \w+ by \S+$/.test(v.reason) ? el("div", { class: "reason" }, v.reason) : null);
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

  // sorted returns v with object keys sorted, so two versions of the
  // arguments line up in a diff whatever order their keys came in.
  function sorted(v) {
    if (Array.isArray(v)) return v.map(sorted);
    if (v === null || typeof v !== "object") return v;
    const o = {};
    for (const k of Object.keys(v).sort()) o[k] = sorted(v[k]);
    return o;
  }

  function pretty(v) { return JSON.stringify(sorted(v), null, 2); }

  // lineDiff is the line diff of a against b (longest common subsequence)
  // as unified-diff lines: " " kept, "-" removed, "+" added.
  function lineDiff(a, b) {
    const n = a.length, m = b.length;
    if (n * m > 4000000) return a.map(l => "-" + l).concat(b.map(l => "+" + l));
    const L = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
    for (let i = n - 1; i >= 0; i--)
      for (let j = m - 1; j >= 0; j--)
        L[i][j] = a[i] === b[j] ? L[i + 1][j + 1] + 1 : Math.max(L[i + 1][j], L[i][j + 1]);
    const out = [];
    let i = 0, j = 0;
    while (i < n && j < m) {
      if (a[i] === b[j]) { out.push(" " + a[i]); i++; j++; }
      else if (L[i + 1][j] >= L[i][j + 1]) out.push("-" + a[i++]);
      else out.push("+" + b[j++]);
    }
    while (i < n) out.push("-" + a[i++]);
    while (j < m) out.push("+" + b[j++]);
    return out;
  }

  // checkEdit reads the editor's text: the arguments it holds, or what is
  // wrong with it, and the diff against the parked arguments.
  function checkEdit(v, text) {
    let args;
    try { args = JSON.parse(text); } catch (e) { return { error: "not valid JSON: " + e.message }; }
    if (args === null || typeof args !== "object" || Array.isArray(args)) return { error: "the arguments must be a JSON object" };
    const before = pretty(v.arguments), after = pretty(args);
    if (before === after) return { error: "no change: edit the arguments, or use Approve" };
    return { args, diff: "--- arguments as parked\n+++ arguments as approved\n" + lineDiff(before.split("\n"), after.split("\n")).join("\n") + "\n" };
  }

  // editView is the "edit arguments" box of a parked call: a JSON editor
  // checked as one types, the diff against the parked arguments, and
  // Approve with changes, enabled only for valid, changed arguments.
  function editView(v, comment, msg, buttons) {
    const st = edits[v.call_id] || (edits[v.call_id] = { open: false, text: pretty(v.arguments) });
    const area = el("textarea", { class: "edit-args", rows: String(Math.min(16, st.text.split("\n").length + 1)), spellcheck: "false", "aria-label": "edited arguments (JSON)" });
    area.value = st.text;
    const status = el("div", { class: "edit-status msg" });
    const preview = el("div", { class: "edit-diff" });
    const go = el("button", { class: "approve", type: "button", "data-action": "approve-edit" }, "Approve with changes");
    const update = () => {
      st.text = area.value;
      const r = checkEdit(v, area.value);
      go.disabled = !!r.error;
      status.className = "edit-status msg" + (r.error ? " err" : "");
      status.textContent = r.error || "the call will run with these arguments, judged again by the policy:";
      preview.replaceChildren(...(r.diff ? [diffView(r.diff)] : []));
    };
    area.addEventListener("input", update);
    go.addEventListener("click", () => {
      const r = checkEdit(v, area.value);
      if (r.error) { update(); return; }
      decide(v.call_id, "approve", { comment: comment.value, arguments: r.args }, msg, buttons.concat([go]));
    });
    update();
    const box = el("details", { class: "edit", open: st.open },
      el("summary", {}, "Edit arguments"), area, status, preview, el("div", { class: "actions" }, go));
    box.addEventListener("toggle", () => { st.open = box.open; });
    return box;
  }

  function card(v) {
    const q = v.question;
    const dl = el("dl", { class: "meta" });
    const row = (k, val) => { if (val) dl.append(el("dt", {}, k), el("dd", {}, val)); };
    row("call", v.call_id);
    row("agent", v.agent);
    row("session", v.session_id);
    row("tool", v.tool);
    dl.append(el("dt", {}, "requested"), el("dd", { class: "requested" },
      timeEl(v.requested_at), " ", el("span", { class: "ago", "data-since": v.requested_at }, "(" + ago(v.requested_at) + ")")));
    dl.append(el("dt", {}, "why"), el("dd", {}, whyView(v)));
    row("offending", v.offending);
    if (v.approvers > 1) row("approvals", (v.approved_by || []).length + " of " + v.approvers + ((v.approved_by || []).length ? " (" + v.approved_by.join(", ") + ")" : ""));
    const leftEl = el("span", { class: "left", "data-expires": v.expires_at }, left(v.expires_at));
    dl.append(el("dt", {}, "expires"), el("dd", {}, timeEl(v.expires_at, "expires"), " (", leftEl, ")"));

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
      // "Always allow" offers the narrowest scope (the whole command);
      // a wider one is a choice made in the list next to it.
      const scopes = v.always_allow_scopes && v.always_allow_scopes.length ? v.always_allow_scopes : [v.always_allow_scope || {}];
      const scopeText = (scope) => scope.command_prefix ? "commands starting “" + scope.command_prefix + "”" : scope.path_pattern ? "path " + scope.path_pattern : "this tool";
      let scope = scopes[0];
      const always = el("button", { type: "button", "data-action": "always",
        onclick: () => decide(v.call_id, "approve", { comment: text.value, always_allow: scope.command_prefix || scope.path_pattern ? { command_prefix: scope.command_prefix || "", path_pattern: scope.path_pattern || "" } : true }, msg, buttons) });
      const label = () => {
        always.textContent = "Approve & always allow " + scopeText(scope);
        always.title = "approve, and from now on allow " + v.agent + " " + v.tool + ": " + scopeText(scope);
      };
      label();
      buttons.push(always);
      if (scopes.length > 1) {
        const widen = el("select", { "aria-label": "what always allow covers", "data-action": "widen", onchange: () => { scope = scopes[widen.selectedIndex]; label(); } },
          ...scopes.map((s, i) => el("option", { value: String(i) }, (i ? "wider: " : "just: ") + s.command_prefix + (i ? " …" : ""))));
        buttons.push(widen);
      }
      buttons.push(el("button", { class: "reject", type: "button", "data-action": "reject", onclick: () => {
        if (!text.value.trim()) { msg.className = "msg err"; msg.textContent = "a rejection needs a reason: type it in the box"; text.focus(); return; }
        decide(v.call_id, "reject", { reason: text.value }, msg, buttons);
      } }, "Reject"));
    }
    acts.append(...buttons, msg);
    return el("div", { class: "card" + (q ? " question" : ""), "data-call-id": v.call_id },
      q ? el("p", {}, el("strong", {}, v.agent + " asks: "), q.question) : null,
      dl,
      argsView(v),
      v.diff ? diffView(v.diff) : null,
      q ? null : editView(v, text, msg, buttons),
      q && q.default_answer ? el("p", { class: "msg" }, "default answer on timeout: " + q.default_answer) : null,
      acts);
  }

  function render() {
    const active = document.activeElement;
    const focused = active && active.closest && active.closest(".card");
    const focusID = focused ? focused.getAttribute("data-call-id") : null;
    const focusTag = active && active.tagName === "TEXTAREA" ? "textarea" : "input";
    const caret = active && typeof active.selectionStart === "number" ? active.selectionStart : null;
    countEl.textContent = snapshot.pending.length;
    pendingEl.replaceChildren(...(snapshot.pending.length ? snapshot.pending.map(card) : [el("p", { class: "empty" }, "Nothing waits for a decision.")]));
    if (focusID) {
      const input = pendingEl.querySelector('[data-call-id="' + CSS.escape(focusID) + '"] ' + focusTag);
      if (input) {
        const at = caret === null ? input.value.length : Math.min(caret, input.value.length);
        input.focus();
        input.setSelectionRange(at, at);
      }
    }
    if (!snapshot.history.length) {
      histEl.replaceChildren(el("tr", {}, el("td", { colspan: "7", class: "empty" }, "No decisions yet.")));
      return;
    }
    histEl.replaceChildren(...snapshot.history.map(v => {
      const o = v.outcome || {};
      return el("tr", { "data-call-id": v.call_id },
        el("td", {}, v.call_id), el("td", {}, v.agent), el("td", {}, v.tool),
        el("td", { class: "status" }, o.default_answer ? "answered (default)" : v.status),
        el("td", {}, (o.approvers || []).join(", ")),
        el("td", {}, o.answer ? "answer: " + o.answer : (o.reason || o.comment || ""),
          o.edited_arguments ? el("div", { class: "edited" }, "with changes: ", el("code", {}, JSON.stringify(o.edited_arguments))) : null),
        el("td", { class: "when" }, o.decided_at ? timeEl(o.decided_at) : ""));
    }));
  }

  setInterval(() => {
    for (const e of document.querySelectorAll("[data-expires]")) {
      const t = left(e.getAttribute("data-expires"));
      e.textContent = t;
      e.classList.toggle("soon", t === "expired" || !t.includes("m"));
    }
    for (const e of document.querySelectorAll("[data-since]")) e.textContent = "(" + ago(e.getAttribute("data-since")) + ")";
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
