// Child of transcript-crash.test.ts: resumes a session and appends to it in durable mode as fast
// as it can, printing each uuid once its append has resolved (after the fdatasync), until killed.
import { AgentLog, resume, TranscriptWriter } from '../dist/src/index.js'

const [dir, sessionId, round] = process.argv.slice(2)
const resumed = await resume(dir, sessionId)
const log = await AgentLog.open({ root: `${dir}/.noa`, workers: 1 })
const writer = new TranscriptWriter({ dir, sessionId, log, parentUuid: resumed.parentUuid })
// A pipe write of a short line is synchronous on Linux: once written, the parent has it.
process.stdout.write(`ready ${resumed.records.length}\n`)

const inFlight = new Set()
for (let n = 0; ; n++) {
  // Some large records, so a kill can land in the middle of a write.
  const text = n % 5 === 0 ? `${round}:${n} ${'ü'.repeat(20_000 + n)}` : `${round}:${n}`
  const p = writer
    .recordMessage(
      { role: n % 2 ? 'assistant' : 'user', content: [{ type: 'text', text }] },
      { output_tokens: n },
    )
    .then((record) => process.stdout.write(`${record.uuid}\n`))
    .catch((err) => {
      process.stderr.write(`append failed: ${err.message}\n`)
      process.exit(3)
    })
    .finally(() => inFlight.delete(p))
  inFlight.add(p)
  if (inFlight.size >= 16) await Promise.race(inFlight)
}
