/**
 * What goes wrong on the NATS side of replication, told apart: errors named as noa's
 * (NOA_REPLICATION, NOA_STREAM_CONFIG), the server's refusals by their API code, transient
 * failures that a retry cures (with Backoff and sleep) from the ones that stop a run.
 */
import { Errors, NoaError } from '../engine/errors.js'

export function replicationError(message: string, details: Record<string, unknown> = {}, cause?: unknown) {
  return Errors.REPLICATION(message, details, cause === undefined ? undefined : { cause })
}

export function streamConfigError(message: string, details: Record<string, unknown> = {}) {
  return Errors.STREAM_CONFIG(message, details)
}

export function describe(err: unknown): string {
  return err instanceof Error ? err.message || err.name : String(err)
}

export function apiCode(err: unknown): number | undefined {
  if (err instanceof Error && err.name.endsWith('ApiError')) return (err as { code?: number }).code
  if (err instanceof Error && 'code' in err && typeof (err as { code: unknown }).code === 'number') {
    return (err as { code: number }).code
  }
  return undefined
}

/** The server refused a publish because the subject's last sequence is not the one expected. */
export function isWrongLastSequence(err: unknown): boolean {
  const code = apiCode(err)
  return code === 10071 || (err instanceof Error && /wrong last sequence/i.test(err.message))
}

/**
 * Failures that a retry can cure: the connection is down or coming back, the request timed
 * out, JetStream is not answering yet after a server restart.
 */
export function isTransient(err: unknown): boolean {
  if (!(err instanceof Error)) return false
  switch (err.name) {
    case 'TimeoutError':
    case 'ConnectionError':
    case 'RequestError':
    case 'NoRespondersError':
    case 'JetStreamNotEnabled':
    case 'Interrupted':
      return true
  }
  const status = (err as { status?: unknown }).status
  if (status === 503 || status === 408) return true
  return /timeout|disconnect|no responders|temporarily unavailable|not enabled/i.test(err.message)
}

/**
 * Runs `fn`, turning a failure that is neither a NoaError nor a system error (those keep their
 * shape) into a NOA_REPLICATION error that names the operation and the server's reason.
 */
export async function asNoaError<T>(what: string, fn: () => Promise<T>): Promise<T> {
  try {
    return await fn()
  } catch (err) {
    if (err instanceof NoaError) throw err
    if (err instanceof Error && typeof (err as NodeJS.ErrnoException).code === 'string') throw err
    throw replicationError(`${what} failed: ${describe(err)}`, {}, err)
  }
}

/** Exponential backoff with jitter: 100 ms doubling to 2 s. */
export class Backoff {
  private attempt = 0
  constructor(
    private readonly minMs = 100,
    private readonly maxMs = 2_000,
  ) {}
  next(): number {
    const base = Math.min(this.maxMs, this.minMs * 2 ** this.attempt)
    this.attempt++
    return Math.round(base / 2 + (Math.random() * base) / 2)
  }
  reset(): void {
    this.attempt = 0
  }
}

/** Resolves after `ms`, or at once when the signal aborts (never rejects). */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve()
    const done = () => {
      clearTimeout(timer)
      signal?.removeEventListener('abort', done)
      resolve()
    }
    const timer = setTimeout(done, ms)
    signal?.addEventListener('abort', done, { once: true })
  })
}

export { describe as describeError }
