/** What a long-running push or pull reports as it goes: events and progress (the CLI prints them). */

/** Progress and trouble that a long-running push or pull reports (the CLI prints them on stderr). */
export type ReplicationEvent =
  | { type: 'retry'; what: string; error: string; delayMs: number }
  | { type: 'connection'; status: string; detail?: string }
  | { type: 'skipped'; workspace: string; reason: string }
  | { type: 'warning'; message: string }
  /** Follow mode is set up: from here on new entries are picked up as they come. */
  | { type: 'following'; message: string }

export type EventSink = (event: ReplicationEvent) => void

/** How far a push or pull has got, for a progress line (called often: keep it cheap). */
export interface ReplicationProgress {
  /** Entries published (push) or appended (pull) by this run. */
  entries: number
  /** Objects published or written by this run. */
  objects: number
  /** Pull: every message up to this stream sequence is applied. */
  streamSeq?: number
  /** Pull without follow: the stream sequence it runs up to. */
  lastStreamSeq?: number
}

export type ProgressSink = (progress: ReplicationProgress) => void
