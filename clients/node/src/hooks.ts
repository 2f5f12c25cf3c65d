// Settle hooks: what a worker tells the application after it settled an attempt (onSettled)
// and when jobs ran out of attempts (onExhausted), as @ultimat3/jobs's claim options did. A hook
// runs after the settle committed; one that throws (or whose promise rejects) is logged with
// its own code and changes nothing: the settle stands.

import type { Job } from './context.js';
import type { Logger, Outcome } from './log.js';

/** How a settled attempt ended, as onSettled is told: parked (a snooze, a wait for an event or
 * a durable sleep) is `snoozed`; `failed` is an attempt out of retries whose job type does not
 * dead-letter. */
export type SettledOutcome = 'completed' | 'retried' | 'dead' | 'failed' | 'cancelled' | 'snoozed';

const SETTLED: Partial<Record<Outcome, SettledOutcome>> = {
  completed: 'completed', retried: 'retried', dead: 'dead', failed: 'failed', cancelled: 'cancelled', parked: 'snoozed',
};

export type OnSettled = (job: Job, outcome: SettledOutcome) => unknown;
export type OnExhausted = (jobs: readonly Job[]) => unknown;

/** The codes a failed hook is logged with (the line's `code`). */
export const hookCodes = {
  onSettledFailed: 'PGJOBS_ON_SETTLED_FAILED',
  onExhaustedFailed: 'PGJOBS_ON_EXHAUSTED_FAILED',
} as const;

/** The application's hooks of one worker, and the promises of its async ones. */
export class Hooks {
  private readonly pending = new Set<Promise<void>>();

  constructor(
    private readonly onSettled: OnSettled | undefined,
    private readonly onExhausted: OnExhausted | undefined,
    private readonly logger: Logger,
  ) {}

  /** An attempt ended with this outcome (the worker's): the hooks of a settled one. */
  ended(job: Job, outcome: Outcome): void {
    const settled = SETTLED[outcome];
    if (settled === undefined) return; // lost, handed back, timed out, unknown name: nothing this worker settled
    if (this.onSettled) this.call(hookCodes.onSettledFailed, 'onSettled', [job], () => this.onSettled?.(job, settled));
    if (this.onExhausted && (settled === 'dead' || settled === 'failed')) {
      this.call(hookCodes.onExhaustedFailed, 'onExhausted', [job], () => this.onExhausted?.([job]));
    }
  }

  /** The jobs a claim of this worker buried (their final attempt lapsed, or their run is over):
   * announced once, together. */
  buried(jobs: readonly Job[]): void {
    if (jobs.length > 0 && this.onExhausted) {
      this.call(hookCodes.onExhaustedFailed, 'onExhausted', jobs, () => this.onExhausted?.(jobs));
    }
  }

  /** Resolves once the async hooks still running have ended. */
  async settled(): Promise<void> {
    await Promise.all(this.pending);
  }

  private call(code: string, hook: string, jobs: readonly Job[], run: () => unknown): void {
    let answer: unknown;
    try {
      answer = run();
    } catch (err) {
      this.failed(code, hook, jobs, err);
      return;
    }
    if (answer !== null && typeof answer === 'object' && typeof (answer as PromiseLike<unknown>).then === 'function') {
      const done: Promise<void> = Promise.resolve(answer as PromiseLike<unknown>)
        .then(() => {}, (err: unknown) => this.failed(code, hook, jobs, err))
        .finally(() => this.pending.delete(done));
      this.pending.add(done);
    }
  }

  private failed(code: string, hook: string, jobs: readonly Job[], err: unknown): void {
    let error: string;
    try {
      error = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
    } catch {
      error = Object.prototype.toString.call(err);
    }
    this.logger.error(`the ${hook} hook failed; the settle stands`,
      { code, hook, jobIds: jobs.map((j) => j.id), error: error.split('\n')[0] });
  }
}
