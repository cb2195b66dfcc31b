/**
 * A test run on a machine without nats-server: each replication suite fails (never skipped in
 * silence) with one line saying what is missing and how to install it. This file needs no server.
 */
import { describe, expect, it } from 'vitest'
import { tempDir } from '../helpers/index.js'
import { natsServerBinary } from '../helpers/nats.js'

describe('a test run without nats-server', () => {
  it('says so in one line, with how to install it', () => {
    const empty = tempDir()
    for (const env of [{ PATH: empty }, { PATH: empty, NOA_NATS_SERVER: `${empty}/nats-server` }]) {
      let message = ''
      try {
        natsServerBinary(env, [])
      } catch (err) {
        message = (err as Error).message
        expect((err as Error).stack).toBe(`Error: ${message}`) // printed alone, not with a trace
      }
      expect(message).toMatch(/nats-server/)
      expect(message).toContain('apt-get install nats-server')
      expect(message).toContain('NOA_TEST_NATS_URL')
      expect(message).not.toContain('\n')
    }
  })
})
