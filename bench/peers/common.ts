/**
 * What every contender in the peers suite implements, and the helpers they share. A contender is
 * a `Peer` (something that appends) and/or a `Store` (something that holds a 1M-entry log to
 * replay and reopen). Every workload is written once, in suite.ts, against these interfaces, so
 * noa and each peer run exactly the same loop.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs'
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { nowMicros } from '../../src/engine/clock.js'
import type { EntryInput } from '../../src/engine/entry.js'
import { entryFor } from '../cases.js'

/**
 * bench/peers/ in the source tree. This file runs from dist/bench/peers/, where Node's resolution
 * would never reach bench/peers/node_modules, so the peers are loaded through a require anchored
 * at the peers' own package.json.
 */
export const PEERS_DIR = fileURLToPath(new URL('../../../bench/peers/', import.meta.url))
export const requirePeer = createRequire(join(PEERS_DIR, 'package.json'))

/** A peer module, required on first use: a child process loads only the peer it measures. */
export function lazy<T>(load: () => T): () => T {
  let value: T | undefined
  return () => {
    value ??= load()
    return value
  }
}

/** The version of a peer package as installed, for the results header. */
export function peerVersion(name: string): string {
  try {
    // Read, not required: some packages (lmdb) do not export their package.json.
    const file = join(PEERS_DIR, 'node_modules', name, 'package.json')
    return (JSON.parse(readFileSync(file, 'utf8')) as { version: string }).version
  } catch {
    return 'not installed'
  }
}

export type Kind = 'noa' | 'peer' | 'floor' | 'not-durable'

/** Appends to `workspaces` workspaces, numbered 0 … workspaces-1. */
export interface Writer {
  /** Entry `i` to workspace `k`; resolves once the entry is durable (hypercore: once appended). */
  append(k: number, i: number): Promise<unknown>
  close(): Promise<void>
}

export interface Peer {
  id: string
  /** Short, for chart labels. */
  label: string
  kind: Kind
  /** What it does to make an entry durable before acknowledging it, for the results. */
  how: string
  /** Loads its modules, so that the timed part never pays for a require. */
  load(): void
  /** Its writer can go on in a store written before (`WriterOptions.resume`). */
  resumes?: boolean
  writer(dir: string, workspaces: number, options?: WriterOptions): Promise<Writer>
}

export interface WriterOptions {
  /**
   * The workspaces are new: nothing of them is made before the first append (the create
   * workload). By default a writer may make them before the clock, as a host has within its
   * first second (noa opens and creates every log).
   */
  fresh?: boolean
  /**
   * The store holds entries from before (a prefilled workload): each workspace's seqs go on after
   * its last, read before the clock. Only peers with `resumes` take it.
   */
  resume?: boolean
}

/** A 1M-entry log in one workspace: prepared once per run, then replayed and reopened in trials. */
export interface Store {
  id: string
  label: string
  kind: Kind
  /** What replay and open/recover mean for it. */
  replayHow: string
  openHow: string
  load(): void
  prepare(dir: string, entries: number): Promise<void>
  /** Reads every entry in order into objects; returns how many. */
  replay(dir: string): Promise<number>
  /** Opens the log until it is ready to take the next append (only this part is timed). */
  open(dir: string): Promise<Opened>
}

export interface Opened {
  /** The last seq the open found: proof that it read the log. */
  lastSeq: number
  close(): Promise<void>
}

export function wsName(k: number): string {
  return `agent-${k}`
}

/** The k of `wsName(k)`, or -1 for another name. */
export function wsIndex(name: string): number {
  return /^agent-\d+$/.test(name) ? Number(name.slice(6)) : -1
}

/** The workspace every Store holds its 1M entries in. */
export const REPLAY_WS = 'replay'

export interface Stamped {
  seq: number
  ts: number
}

/**
 * The entry a peer stores: the same fields, values and key order as the line noa writes for
 * `entryFor(i)` (`{"seq":…,"op":"write","path":…,"blob":…,"ts":…}`, about 200 bytes), built the
 * way a user of that peer would build it.
 */
export function recordFor(seq: number, i: number): EntryInput & Stamped {
  return { seq, ...entryFor(i), ts: nowMicros() }
}

/** The JSON line of `recordFor`, newline included. */
export function lineFor(seq: number, i: number): string {
  return `${JSON.stringify(recordFor(seq, i))}\n`
}

/** Per-workspace seq counters, as each peer's caller has to keep them itself. */
export class Seqs {
  private readonly next: Float64Array
  constructor(workspaces: number) {
    this.next = new Float64Array(workspaces)
  }
  /** Workspace `k` already holds seqs 1 … `last` (a store written before). */
  resume(k: number, last: number): void {
    this.next[k] = last
  }
  take(k: number): number {
    const seq = (this.next[k] as number) + 1
    this.next[k] = seq
    return seq
  }
}

/** Apparent and allocated bytes of everything under a folder. */
export function diskUsage(dir: string): { apparent: number; allocated: number } {
  let apparent = 0
  let allocated = 0
  for (const d of readdirSync(dir, { withFileTypes: true })) {
    const p = join(dir, d.name)
    if (d.isDirectory()) {
      const sub = diskUsage(p)
      apparent += sub.apparent
      allocated += sub.allocated
    } else if (d.isFile()) {
      const st = statSync(p)
      apparent += st.size
      allocated += st.blocks * 512
    }
  }
  return { apparent, allocated }
}
