// What a worker checks before it queues a job's result for a settle, and which refusals of a
// settle are worth sending again: a result the server would refuse must cost its own job only,
// never the batch it would have been settled with.

/** A result as JSON text, refused (thrown) when it cannot be encoded (a BigInt, a cycle) or is
 * larger than the server takes (pg_jobs.max_payload_size, measured here as its UTF-8 text). */
export function encodeResult(result: unknown, maxBytes: number | null): string {
  let text: string | undefined;
  try {
    // (undefined for a function or a symbol, whatever its type says)
    text = result == null ? 'null' : (JSON.stringify as (value: unknown) => string | undefined)(result);
  } catch (err) {
    throw new Error(`the result cannot be encoded as JSON: ${err instanceof Error ? err.message : 'not encodable'}`);
  }
  if (text === undefined) return 'null'; // a function or a symbol: nothing, as JSON.stringify says
  // (A UTF-16 code unit is at most 3 bytes of UTF-8: a short text is not measured.)
  if (maxBytes !== null && text.length * 3 > maxBytes) {
    const bytes = Buffer.byteLength(text, 'utf8');
    if (bytes > maxBytes) {
      throw new Error(`the result is ${bytes} bytes of JSON, over pg_jobs.max_payload_size (${maxBytes} bytes): `
        + 'return less, or keep it elsewhere and return a reference to it');
    }
  }
  return text;
}

/** Whether an error of a settle may pass if the same statement is sent again: a connection
 * lost, a conflict or lack of resources, an operator's cancel or shutdown. Any other refusal
 * is for what the statement carries, and sending it again would be refused again. */
export function isTransient(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code !== 'string') return true; // no SQLSTATE: the connection, not the statement
  return ['08', '40', '53', '55', '57', '58', 'XX'].includes(code.slice(0, 2));
}

/** The longest delay a Node.js timer takes (about 24.8 days): a longer one fires at once. */
const MAX_TIMER_MS = 2 ** 31 - 1;

/** setTimeout for any delay: one past MAX_TIMER_MS is made of shorter ones. */
export function longTimeout(fn: () => void, ms: number): { clear(): void } {
  let timer: NodeJS.Timeout;
  const arm = (left: number): void => {
    timer = setTimeout(left > MAX_TIMER_MS ? () => arm(left - MAX_TIMER_MS) : fn, Math.min(Math.max(0, left), MAX_TIMER_MS));
  };
  arm(ms);
  return { clear: () => clearTimeout(timer) };
}
