// Logging and metrics: what a worker reports, through interfaces the application can fill.

export type Fields = Record<string, unknown>;

export interface Logger {
  info(message: string, fields?: Fields): void;
  warn(message: string, fields?: Fields): void;
  error(message: string, fields?: Fields): void;
}

/** One JSON object a line on stderr: {"level", "msg", ...fields}. */
export const jsonLogger: Logger = {
  info: (msg, fields) => process.stderr.write(`${JSON.stringify({ level: 'info', msg, ...fields })}\n`),
  warn: (msg, fields) => process.stderr.write(`${JSON.stringify({ level: 'warn', msg, ...fields })}\n`),
  error: (msg, fields) => process.stderr.write(`${JSON.stringify({ level: 'error', msg, ...fields })}\n`),
};

export const silentLogger: Logger = { info: () => {}, warn: () => {}, error: () => {} };

/** How a job's attempt ended, as the worker saw it. */
export type Outcome =
  | 'completed' | 'retried' | 'failed' | 'dead' | 'lost' | 'parked' | 'unknown_name' | 'handed_back'
  | 'timed_out' | 'cancelled';

export interface Metrics {
  /** An attempt ended: its queue, name, outcome and duration. */
  attemptEnded(queue: string, name: string, outcome: Outcome, durationMs: number): void;
  /** The number of handlers running in this worker changed. */
  running(count: number): void;
}

/** Counts kept in memory, for tests and for a /metrics page of the application's own. */
export class CountingMetrics implements Metrics {
  readonly outcomes = new Map<string, number>();
  runningNow = 0;

  attemptEnded(queue: string, name: string, outcome: Outcome): void {
    const key = `${queue}\u0000${name}\u0000${outcome}`;
    this.outcomes.set(key, (this.outcomes.get(key) ?? 0) + 1);
  }

  running(count: number): void {
    this.runningNow = count;
  }

  /** The count of attempts that ended so, over every queue and name when not given. */
  count(outcome: Outcome, filter: { queue?: string; name?: string } = {}): number {
    let n = 0;
    for (const [key, value] of this.outcomes) {
      const [queue, name, o] = key.split('\u0000');
      if (o === outcome && (filter.queue === undefined || filter.queue === queue)
        && (filter.name === undefined || filter.name === name)) n += value;
    }
    return n;
  }

  /** What it counted: the jobs running now and each (queue, name, outcome)'s attempts; what
   * JSON.stringify, console.log and String() show. */
  toJSON(): { running: number; outcomes: { queue: string; name: string; outcome: string; count: number }[] } {
    const outcomes = [...this.outcomes].map(([key, count]) => {
      const [queue = '', name = '', outcome = ''] = key.split('\u0000');
      return { queue, name, outcome, count };
    });
    return { running: this.runningNow, outcomes };
  }

  toString(): string {
    return `CountingMetrics ${JSON.stringify(this)}`;
  }

  [Symbol.for('nodejs.util.inspect.custom')](): string {
    return this.toString();
  }
}
