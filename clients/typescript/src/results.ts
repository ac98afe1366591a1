// A client's one subscription to its agent's results (pkg/client's
// resultMux).

import type { Msg, NatsConnection, Subscription } from "@nats-io/transport-node";

/** RESULTS_LINGER is how long a client keeps its results subscription once no call waits, in ms. */
export const RESULTS_LINGER = 30_000;

/** Listener hears what the results subscription delivers for one call: a message, or the subscription's error. */
export type Listener = (err: Error | null, msg: Msg | undefined) => void;

/**
 * ResultMux is a client's one subscription to its agent's results,
 * toolgate.result.<agent>.*, held while calls wait for theirs: each
 * result goes to the calls waiting on its id. One subscription per call
 * cost the cluster an interest change per call and its undoing, each
 * sent to every other node; with one subscription, calls waiting
 * together share it. It is made when the first call starts to wait,
 * before the call is published, and removed RESULTS_LINGER after the
 * last one stopped waiting: an agent's calls follow one another.
 *
 * It also counts the connection's reconnects and slow-consumer events,
 * after which a waiting call looks up its stored result at once
 * (LookupSchedule).
 */
export class ResultMux {
  /** linger is how long the subscription outlives the last waiting call, in ms. */
  linger = RESULTS_LINGER;
  /** reconnects counts the connection's reconnections. */
  reconnects = 0;
  /** dropped counts the slow-consumer events: messages a subscription may have lost. */
  dropped = 0;
  private sub: Subscription | undefined;
  private idle: NodeJS.Timeout | undefined;
  private readonly prefix: string;
  private readonly waiting = new Map<string, Set<Listener>>();

  constructor(
    private readonly nc: NatsConnection,
    agent: string,
  ) {
    this.prefix = `toolgate.result.${agent}.`;
    (async () => {
      for await (const s of nc.status()) {
        if (s.type === "reconnect") this.reconnects++;
        else if (s.type === "slowConsumer") this.dropped++;
      }
    })().catch(() => {});
    nc.closed()
      .then(() => this.idle && clearTimeout(this.idle))
      .catch(() => {});
  }

  /**
   * wait registers l for the results of call id, subscribing first when
   * no subscription is held, and returns the function that unregisters it.
   */
  wait(id: string, l: Listener): () => void {
    if (this.idle) {
      clearTimeout(this.idle);
      this.idle = undefined;
    }
    if (!this.sub) {
      this.sub = this.nc.subscribe(this.prefix + "*", { callback: (err, msg) => this.deliver(err, msg) });
    }
    let ls = this.waiting.get(id);
    if (!ls) {
      ls = new Set();
      this.waiting.set(id, ls);
    }
    ls.add(l);
    let stopped = false;
    return () => {
      if (stopped) return;
      stopped = true;
      this.stop(id, l);
    };
  }

  /** stop unregisters l and, once no call waits, removes the subscription after the linger. */
  private stop(id: string, l: Listener): void {
    const ls = this.waiting.get(id);
    ls?.delete(l);
    if (ls && ls.size === 0) this.waiting.delete(id);
    if (this.waiting.size > 0 || !this.sub) return;
    if (this.idle) clearTimeout(this.idle);
    this.idle = setTimeout(() => this.unsubscribeIdle(), this.linger);
    this.idle.unref();
  }

  /** unsubscribeIdle removes the subscription when no call waits. */
  private unsubscribeIdle(): void {
    this.idle = undefined;
    if (this.waiting.size > 0 || !this.sub) return;
    const s = this.sub;
    this.sub = undefined;
    if (!this.nc.isClosed()) s.unsubscribe();
  }

  /**
   * deliver hands a result to the listeners of its call id; a result no
   * call waits for (another process's of the same agent, a late copy) is
   * dropped. An error (the subscription refused) goes to every listener.
   */
  private deliver(err: Error | null, msg: Msg): void {
    if (err) {
      const all = [...this.waiting.values()].flatMap((ls) => [...ls]);
      if (this.sub && this.sub.isClosed()) this.sub = undefined;
      for (const l of all) l(err, undefined);
      return;
    }
    if (!msg.subject.startsWith(this.prefix)) return;
    const ls = this.waiting.get(msg.subject.slice(this.prefix.length));
    if (!ls) return;
    for (const l of [...ls]) l(null, msg);
  }
}
