/** replicate push and pull draw their progress on a terminal, and print nothing of it when piped. */
import { describe, expect, it } from 'vitest'
import { runMainIo, tempDir } from '../helpers/index.js'
import { uniqueNames, useNats } from '../helpers/nats.js'
import { dropStream, fill, initStreamCli, logBytes } from '../helpers/replicate.js'

const nats = useNats()
const ERASE = '\r\x1b[K'
const NOW = { NOA_PROGRESS_DELAY_MS: '0' }

describe('replicate progress', () => {
  it('push and pull: a progress line on a terminal, erased at the end; nothing when piped', async () => {
    const { prefix, stream } = uniqueNames()
    await initStreamCli(nats.url(), prefix, stream)
    try {
      const a = tempDir()
      await fill(a, { main: [1, 200], side: [1, 20] })
      const args = ['--nats', nats.url(), '--prefix', prefix]

      const push = await runMainIo(['replicate', 'push', '--root', a, ...args], { isTTY: true, env: NOW })
      expect(push.status).toBe(0)
      expect(push.stderr.startsWith(ERASE)).toBe(true)
      expect(push.stderr).toMatch(/pushed \d+ entr(y|ies) \(\d+\/s\) and \d+ objects?/)
      expect(push.stderr.endsWith(ERASE)).toBe(true)
      expect(push.stdout).toMatch(/^pushed 220 entries from 2 workspaces/)

      const b = tempDir()
      const pull = await runMainIo(['replicate', 'pull', '--root', b, ...args], { isTTY: true, env: NOW })
      expect(pull.status).toBe(0)
      expect(pull.stderr).toMatch(
        /pulled \d+ entr(y|ies) \(\d+\/s\) and \d+ objects?, stream seq \d+\/\d+ \d+%/,
      )
      expect(pull.stderr.endsWith(ERASE)).toBe(true)
      expect(logBytes(b, 'main').equals(logBytes(a, 'main'))).toBe(true)

      // Piped: the report only.
      await fill(a, { main: [201, 5] })
      const quiet = await runMainIo(['replicate', 'push', '--root', a, ...args], { env: NOW })
      expect(quiet.status).toBe(0)
      expect(quiet.stderr).toBe('')
      const quietPull = await runMainIo(['replicate', 'pull', '--root', b, ...args], { env: NOW })
      expect(quietPull.stderr).toBe('')
      expect(quietPull.stdout).toMatch(/^pulled 5 entries/)
    } finally {
      await dropStream(nats.url(), stream)
    }
  })
})
