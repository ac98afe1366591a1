// When a waiting call looks for its stored result (pkg/client's
// lookupSchedule).

/** STORED_RESULT_CHECK is how often a waiting call checks whether a look-up of its stored result is due, in ms, and the first look-up's delay. */
export const STORED_RESULT_CHECK = 5000;

/** MAX_STORED_RESULT_CHECK is the longest a waiting call goes without looking for its stored result, in ms. */
export const MAX_STORED_RESULT_CHECK = 60_000;

/**
 * LookupSchedule says when a waiting call looks for its stored result.
 * Every look-up is a request a worker answers from the results stream:
 * on a cluster, messages between the nodes. A live result is missed when
 * the connection was lost meanwhile (a reconnect), when the subscription
 * dropped messages (a slow consumer), or, rarely, when the result was
 * published on a node the subscription's interest had not reached yet.
 * The first two are seen at each check and looked for at once; for the
 * rest the look-ups back off: the first after STORED_RESULT_CHECK, then
 * twice as long each time up to MAX_STORED_RESULT_CHECK. A call queued
 * for a minute behind a fleet's backlog then costs three look-ups, not
 * twelve.
 */
export class LookupSchedule {
  private next: number;
  private every = STORED_RESULT_CHECK;
  private reconnects: number;
  private dropped: number;

  /** A wait beginning at now (ms) on a connection that has reconnected reconnects times and dropped dropped messages. */
  constructor(now: number, reconnects: number, dropped = 0) {
    this.next = now + STORED_RESULT_CHECK;
    this.reconnects = reconnects;
    this.dropped = dropped;
  }

  /**
   * due reports whether a look-up is due at now (ms), given the
   * connection's reconnects and the messages dropped so far; when one
   * is, the next is scheduled.
   */
  due(now: number, reconnects: number, dropped: number): boolean {
    const missed = reconnects !== this.reconnects || dropped !== this.dropped;
    if (!missed && now < this.next) {
      return false;
    }
    this.reconnects = reconnects;
    this.dropped = dropped;
    if (missed) {
      this.every = STORED_RESULT_CHECK;
    }
    this.every = Math.min(2 * this.every, MAX_STORED_RESULT_CHECK);
    this.next = now + this.every;
    return true;
  }
}
