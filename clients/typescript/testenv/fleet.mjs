// A real toolgate fleet for the client's tests: the worker binary on its
// embedded NATS server (a random port, its data and state in temp
// directories), the approver service, and agent credentials minted with
// `toolctl creds agent`. The binaries are built once per test run from
// the repository (go build), or taken from $TOOLGATE_BIN when set.

import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync, existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";

/** repo is the repository's root. */
export const repo = fileURLToPath(new URL("../../../", import.meta.url));

/** lookPath reports whether prog is on PATH. */
function lookPath(prog) {
  return spawnSync("sh", ["-c", `command -v ${prog}`]).status === 0;
}

/**
 * needs skips the test when an outside program is missing, naming the
 * Debian package; under CI=true a missing program fails the test.
 */
export function needs(t, prog, pkg) {
  if (lookPath(prog)) return true;
  const msg = `${prog} not found: install the Debian package ${pkg}`;
  if (process.env.CI === "true") {
    throw new Error(msg + " (CI=true: required)");
  }
  t.skip(msg);
  return false;
}

let built;

/** binaries returns the directory of the worker, toolctl and approver binaries, building them once. */
export function binaries() {
  if (process.env.TOOLGATE_BIN) return process.env.TOOLGATE_BIN;
  if (built) return built;
  const dir = mkdtempSync(join(tmpdir(), "toolgate-ts-bin-"));
  const r = spawnSync("go", ["build", "-o", dir, "./cmd/worker", "./cmd/toolctl", "./cmd/approver"], { cwd: repo, encoding: "utf8" });
  if (r.status !== 0) {
    throw new Error(`go build: ${r.error ?? ""}\n${r.stderr}`);
  }
  process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
  built = dir;
  return dir;
}

/** waitOutput resolves with the first match of re in what proc prints, or rejects when it exits first. */
function waitOutput(proc, out, re, what) {
  return new Promise((resolve, reject) => {
    const check = () => {
      const m = out.text.match(re);
      if (m) {
        proc.stdout.off("data", check);
        proc.stderr.off("data", check);
        proc.off("exit", exited);
        resolve(m);
      }
    };
    const exited = (code) => reject(new Error(`${what} exited (${code}) before it was ready:\n${out.text}`));
    proc.stdout.on("data", check);
    proc.stderr.on("data", check);
    proc.on("exit", exited);
    check();
  });
}

/** serve starts a program that runs until stopped, collecting its output. */
function serve(bin, args, env, cwd) {
  const proc = spawn(bin, args, { env, cwd, stdio: ["ignore", "pipe", "pipe"] });
  const out = { text: "" };
  proc.stdout.on("data", (b) => (out.text += b));
  proc.stderr.on("data", (b) => (out.text += b));
  const stop = () =>
    new Promise((resolve) => {
      if (proc.exitCode !== null || proc.signalCode !== null) return resolve();
      const kill = setTimeout(() => proc.kill("SIGKILL"), 30_000);
      proc.once("exit", () => {
        clearTimeout(kill);
        resolve();
      });
      proc.kill("SIGTERM");
    });
  return { proc, out, stop };
}

/**
 * startFleet starts a worker (with policy, on a workspace holding files)
 * and an approver, and returns what the tests use.
 */
export async function startFleet({ policy, files = {} }) {
  const bin = binaries();
  const root = mkdtempSync(join(tmpdir(), "toolgate-ts-"));
  const ws = join(root, "ws");
  const home = join(root, "home");
  for (const d of [ws, home]) mkdirSync(d, { recursive: true });
  for (const [name, content] of Object.entries(files)) writeFileSync(join(ws, name), content);
  writeFileSync(join(root, "policy.yaml"), policy);
  const env = {
    PATH: process.env.PATH,
    HOME: home,
    TOOLGATE_STATE_DIR: join(root, "state"),
    XDG_STATE_HOME: join(home, ".local", "state"),
    XDG_CONFIG_HOME: join(home, ".config"),
  };
  const worker = serve(
    join(bin, "worker"),
    ["--listen", "127.0.0.1:0", "--data", join(root, "data"), "--workspace", ws, "--policy", join(root, "policy.yaml"), "--name", "w1"],
    env,
    root,
  );
  const [, url] = await waitOutput(worker.proc, worker.out, /listening on (nats:\/\/\S+)/, "worker");
  await waitOutput(worker.proc, worker.out, /worker taking calls/, "worker");
  env.NATS_URL = url;
  const approver = serve(join(bin, "approver"), ["--listen", "127.0.0.1:0", "--data", join(root, "approver")], env, root);
  const [, approverURL] = await waitOutput(approver.proc, approver.out, /(http:\/\/127\.0\.0\.1:\d+)/, "approver");
  env.TOOLGATE_APPROVER = approverURL;
  const token = () => readFileSync(join(root, "approver", "tokens"), "utf8").split("\n").find((l) => l.trim() && !l.startsWith("#")).trim().split(/\s+/)[1];

  /** toolctl runs toolctl with args in the fleet's environment. */
  const toolctl = (...args) => {
    const r = spawnSync(join(bin, "toolctl"), args, { env, cwd: root, encoding: "utf8", timeout: 120_000 });
    return { code: r.status, stdout: r.stdout, stderr: r.stderr };
  };
  return {
    url,
    ws,
    root,
    env,
    toolctl,
    /** creds mints an agent's credentials with toolctl and returns the file. */
    creds(agent) {
      const file = join(root, `${agent}.creds`);
      if (!existsSync(file)) {
        const r = toolctl("creds", "agent", agent, "--out", file);
        if (r.code !== 0) throw new Error(`toolctl creds agent ${agent}: ${r.stderr}`);
      }
      return file;
    },
    /** approve approves the parked call id as the approver's person, with toolctl. */
    approve(id) {
      return toolctl("approvals", "approve", id, "--approver", approverURL, "--token", token());
    },
    async stop() {
      await approver.stop();
      await worker.stop();
      rmSync(root, { recursive: true, force: true });
    },
    output: () => worker.out.text + approver.out.text,
  };
}

/** until polls cond (bounded in count, not in time) and fails naming what did not happen. */
export async function until(what, cond, polls = 600, everyMs = 100) {
  for (let i = 0; i < polls; i++) {
    if (await cond()) return;
    await new Promise((r) => setTimeout(r, everyMs));
  }
  throw new Error(`never happened: ${what}`);
}
