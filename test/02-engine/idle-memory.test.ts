/**
 * What an idle workspace keeps in its owner: a few scalars (its name, descriptor, size, seq and
 * ts, its sidecar's block), no buffer and no list. A buffer kept per workspace (a journal record
 * header, a tail read, a batch) costs a host with 10,000 live workspaces megabytes, so each
 * idle file's fields are looked at (OwnerStatus.held), whatever they are named.
 */
import { describe, expect, it } from 'vitest'
import { AgentLog, type OwnerStatus } from '../../dist/src/index.js'
import { blobOf, tempDir } from '../helpers/index.js'

const WORKSPACES = 300

type Held = NonNullable<OwnerStatus['held']>

function total(status: OwnerStatus[]): Held {
  return status.reduce(
    (n, s) => ({
      files: n.files + (s.held as Held).files,
      idle: n.idle + (s.held as Held).idle,
      holding: n.holding + (s.held as Held).holding,
    }),
    { files: 0, idle: 0, holding: 0 },
  )
}

/** The owners' held counts once every workspace is idle and durable in its log (the checkpoint ran). */
async function whenIdle(log: AgentLog, files: number): Promise<Held> {
  let held = total(await log.status({ held: true }))
  // Checkpoints run within a second or so of the last round (CHECKPOINT_AGE_MS); bounded wait.
  for (let i = 0; i < 600 && held.idle < files; i++) {
    await new Promise((r) => setTimeout(r, 50))
    held = total(await log.status({ held: true }))
  }
  return held
}

describe('idle workspaces', () => {
  for (const workers of [2, 0]) {
    it(`keep no buffer and no list once durable (workers: ${workers})`, async () => {
      const root = tempDir()
      const before = await AgentLog.open({ root, workers })
      await before.append('opened-only', { op: 'write', path: 'p', blob: blobOf(0) })
      await before.close()
      const log = await AgentLog.open({ root, workers })
      try {
        const names = Array.from({ length: WORKSPACES }, (_, k) => `idle-${k}`)
        // Two rounds: the first makes the workspaces (and starts the journal), the second goes
        // through it, so that each has had a journal record header.
        for (let round = 0; round < 2; round++) {
          await Promise.all(
            names.map((ws, k) => log.append(ws, { op: 'write', path: `p${round}`, blob: blobOf(k) })),
          )
        }
        // Opened (by a recover) and not appended to: no record header either.
        await log.recover('opened-only')
        const held = await whenIdle(log, WORKSPACES + 1)
        expect(held.files).toBe(WORKSPACES + 1)
        expect(held.idle).toBe(WORKSPACES + 1)
        expect(held.holding).toBe(0)
        // Only when asked for: a status polled in a loop does not look at every file.
        expect((await log.status()).every((s) => s.held === null)).toBe(true)
        // Busy again, then idle again: the round's buffers go once more.
        await Promise.all(names.map((ws, k) => log.append(ws, { op: 'write', path: 'p2', blob: blobOf(k) })))
        expect((await whenIdle(log, WORKSPACES + 1)).holding).toBe(0)
      } finally {
        await log.close()
      }
    })
  }
})
