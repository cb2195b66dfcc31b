/**
 * Checks each writer's durability claim by counting its system calls with `strace -c -f`: the
 * fsync family per appended entry, once with one submitter (every append must be covered by its
 * own sync) and once with 100 submitters on one workspace (group commit may share one). Each
 * count is the difference between a run of N appends and a run of 0, so opening, creating and
 * closing files cancel out. strace counts calls; it cannot show their order relative to the
 * acks, which each peer's documentation states (see the `how` of each peer).
 */
import { spawnSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { release, tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { PEERS_DIR } from './common.js'
import { PEERS } from './suite.js'

export const SYNC_CALLS = ['fsync', 'fdatasync', 'msync', 'sync_file_range', 'syncfs', 'sync'] as const
const WRITE_CALLS = ['write', 'pwrite64', 'writev', 'pwritev', 'pwritev2']
/** io_uring would hide syncs from strace: counted so that a non-zero figure shows up. */
const TRACED = [...SYNC_CALLS, ...WRITE_CALLS, 'io_uring_enter']

export const DURABILITY_JSON = join(PEERS_DIR, 'durability.json')
const PEER_CASES = fileURLToPath(new URL('./cases.js', import.meta.url))

/** Calls per entry, by system call name (only the non-zero ones). */
export type PerEntry = Record<string, number>

export interface PeerDurability {
  label: string
  /** One submitter: fsync-family calls per entry. */
  serial: PerEntry
  /** 100 submitters on one workspace. */
  grouped: PerEntry
  syncsPerEntry: { serial: number; grouped: number }
  /** At least one sync per entry with one submitter. */
  durable: boolean
}

export interface DurabilityFile {
  measured: string
  command: string
  strace: string
  node: string
  kernel: string
  entries: number
  method: string
  peers: Record<string, PeerDurability>
}

/** Parses the table `strace -c -o FILE` writes: calls by system call name. */
export function parseStraceSummary(text: string): Record<string, number> {
  const out: Record<string, number> = {}
  for (const line of text.split('\n')) {
    const t = line.trim().split(/\s+/)
    // % time, seconds, usecs/call, calls, [errors], syscall
    if (t.length < 5 || !/^\d/.test(t[0] as string)) continue
    const name = t[t.length - 1] as string
    const calls = Number(t[3])
    if (name === 'total' || !Number.isFinite(calls)) continue
    out[name] = calls
  }
  return out
}

function straceRun(peer: string, submitters: number, entries: number): Record<string, number> {
  const dir = mkdtempSync(join(tmpdir(), `noa-strace-${peer}-`))
  const out = join(dir, 'strace.txt')
  mkdirSync(join(dir, 'data'))
  try {
    const r = spawnSync(
      'strace',
      [
        '-f',
        '-c',
        '-o',
        out,
        '-e',
        `trace=${TRACED.join(',')}`,
        process.execPath,
        PEER_CASES,
        'count',
        peer,
        String(submitters),
        join(dir, 'data'),
        String(entries),
      ],
      { encoding: 'utf8', timeout: 300_000 },
    )
    if (r.error) throw new Error(`strace could not run (${r.error.message}); install it (Debian: strace)`)
    if (r.status !== 0) throw new Error(`strace of ${peer} failed (${r.status}): ${r.stderr}`)
    return parseStraceSummary(readFileSync(out, 'utf8'))
  } finally {
    rmSync(dir, { recursive: true, force: true })
  }
}

function perEntry(peer: string, submitters: number, entries: number): PerEntry {
  const base = straceRun(peer, submitters, 0)
  const full = straceRun(peer, submitters, entries)
  const out: PerEntry = {}
  for (const name of new Set([...Object.keys(base), ...Object.keys(full)])) {
    const d = ((full[name] ?? 0) - (base[name] ?? 0)) / entries
    // A run also makes a few calls of its own that vary between runs (stdout, thread wake-ups):
    // differences that small are noise, not calls per entry.
    if (d >= 0.005) out[name] = Math.round(d * 1000) / 1000
  }
  return out
}

function syncs(p: PerEntry): number {
  return Math.round(SYNC_CALLS.reduce((sum, name) => sum + (p[name] ?? 0), 0) * 1000) / 1000
}

export function straceVersion(): string | null {
  const r = spawnSync('strace', ['-V'], { encoding: 'utf8' })
  return r.status === 0 ? (r.stdout.split('\n')[0] ?? 'strace') : null
}

/** Runs the check for every writer and writes durability.json; returns what it wrote. */
export function verifyDurability(entries: number, command: string): DurabilityFile {
  const version = straceVersion()
  if (!version) throw new Error('strace is not installed (Debian: apt-get install strace); --strace needs it')
  const peers: Record<string, PeerDurability> = {}
  for (const peer of PEERS) {
    process.stderr.write(`  strace: ${peer.id}\n`)
    const serial = perEntry(peer.id, 1, entries)
    const grouped = perEntry(peer.id, 100, entries)
    const s = { serial: syncs(serial), grouped: syncs(grouped) }
    peers[peer.id] = { label: peer.label, serial, grouped, syncsPerEntry: s, durable: s.serial >= 0.99 }
  }
  const file: DurabilityFile = {
    measured: new Date().toISOString().slice(0, 10),
    command,
    strace: version,
    node: process.version,
    kernel: `Linux ${release()}`,
    entries,
    method: `strace -f -c over exactly N appends to one workspace, minus a run of 0 appends, divided by N (N = ${entries}); "serial": 1 submitter awaiting each ack; "grouped": 100 submitters. Sync calls counted: ${SYNC_CALLS.join(', ')}.`,
    peers,
  }
  writeFileSync(DURABILITY_JSON, `${JSON.stringify(file, null, 2)}\n`)
  return file
}

export function readDurability(): DurabilityFile | null {
  try {
    return JSON.parse(readFileSync(DURABILITY_JSON, 'utf8')) as DurabilityFile
  } catch {
    return null
  }
}
