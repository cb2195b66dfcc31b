/**
 * A transcript folder others can write into: whatever is planted where a main or sidechain
 * transcript, or a session or `subagents/` folder, should be is refused by name, in both writer
 * modes and by the loader; the file outside keeps its torn-looking tail, nothing is created
 * outside, and nothing hangs on a FIFO.
 */
import { mkdirSync, readdirSync, symlinkSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { afterEach, describe, expect, it } from 'vitest'
import { AgentLog } from '../../dist/src/index.js'
import {
  listSidechains,
  loadTranscript,
  type Message,
  sessionUsage,
  TranscriptWriter,
  transcriptPath,
} from '../../dist/src/transcript/index.js'
import { FILE_PLANTS, FOLDER_PLANTS, outsideState, refusal } from '../helpers/hostile.js'
import { runCli, tempDir } from '../helpers/index.js'

const user = (text: string): Message => ({ role: 'user', content: [{ type: 'text', text }] })

const logs: AgentLog[] = []
afterEach(async () => {
  await Promise.all(logs.splice(0).map((l) => l.close()))
})

async function writer(
  dir: string,
  mode: 'buffered' | 'durable',
  agentId?: string,
): Promise<TranscriptWriter> {
  if (mode === 'buffered') return new TranscriptWriter({ dir, sessionId: 's', agentId })
  const log = await AgentLog.open({ root: join(tempDir(), '.noa'), workers: 1 })
  logs.push(log)
  return new TranscriptWriter({ dir, sessionId: 's', agentId, log })
}

describe('a transcript planted by someone else', () => {
  for (const { name, plant } of FILE_PLANTS) {
    for (const agentId of [undefined, 'helper']) {
      const which = agentId ? 'sidechain' : 'main transcript'
      it(`${name} as the ${which} is refused by both writer modes and the loader`, async () => {
        const dir = tempDir()
        const outside = tempDir()
        const file = transcriptPath(dir, 's', agentId)
        mkdirSync(dirname(file), { recursive: true })
        await plant(file, outside)
        const before = outsideState(outside)
        for (const mode of ['buffered', 'durable'] as const) {
          const w = await writer(dir, mode, agentId)
          const err = await refusal(w.recordMessage(user('hello')))
          expect(err.code, mode).toBe('NOA_NOT_REGULAR_FILE')
          expect(err.message).toContain(file)
          expect(w.err()).toBe(err)
          await w.close()
        }
        expect((await refusal(loadTranscript(file))).code).toBe('NOA_NOT_REGULAR_FILE')
        if (agentId) {
          // Listed, so that reading it names the problem instead of hiding the file.
          expect((await listSidechains(dir, 's')).map((s) => s.agentId)).toEqual(['helper'])
          expect((await refusal(sessionUsage(dir, 's'))).code).toBe('NOA_NOT_REGULAR_FILE')
        } else {
          const show = runCli(['transcript', 'show', file])
          expect(show.status).toBe(1)
          expect(show.stderr).toContain('not a regular file')
        }
        expect(outsideState(outside)).toEqual(before)
      })
    }
  }
})

describe('a transcript folder planted by someone else', () => {
  for (const { name, plant } of FOLDER_PLANTS) {
    for (const folder of ['s', 's/subagents']) {
      it(`${name} as ${folder}/ is refused by both writer modes and the readers`, async () => {
        const dir = tempDir()
        const outside = tempDir()
        mkdirSync(dirname(join(dir, folder)), { recursive: true })
        await plant(join(dir, folder), outside)
        const before = outsideState(outside)
        for (const mode of ['buffered', 'durable'] as const) {
          const w = await writer(dir, mode, 'helper')
          const err = await refusal(w.recordMessage(user('hello')))
          expect(err.code, mode).toBe('NOA_NOT_DIRECTORY')
          expect(err.message).toContain(join(dir, folder))
          await w.close()
        }
        expect((await refusal(listSidechains(dir, 's'))).code).toBe('NOA_NOT_DIRECTORY')
        expect((await refusal(sessionUsage(dir, 's'))).code).toBe('NOA_NOT_DIRECTORY')
        expect(outsideState(outside)).toEqual(before)
      })
    }
  }

  it('the folder the caller names may itself be a symlink', async () => {
    const real = tempDir()
    const link = join(tempDir(), 'sessions')
    symlinkSync(real, link)
    const w = new TranscriptWriter({ dir: link, sessionId: 's', agentId: 'helper' })
    await w.recordMessage(user('hello'))
    expect((await loadTranscript(w.path)).records).toHaveLength(1)
    expect(readdirSync(join(real, 's', 'subagents'))).toEqual(['agent-helper.jsonl'])
  })
})
