/**
 * The channel of an in-thread owner (`workers: 0`): messages in order, never delivered inside
 * the sender's call, what was posted before a close still delivered, nothing after it; and
 * through AgentLog, a stream of commits that leaves the event loop its turns and replies the
 * caller owns.
 */
import { describe, expect, it } from 'vitest'
import { AgentLog } from '../../dist/src/engine/agent-log.js'
import { LocalPort } from '../../dist/src/engine/local-port.js'
import { tempDir } from '../helpers/index.js'

const tick = () => new Promise<void>((r) => setImmediate(r))

describe('LocalPort', () => {
  it('delivers in order, later than the call that posts, and take() pulls what is waiting', async () => {
    const [a, b] = LocalPort.pair()
    const got: unknown[] = []
    b.on('message', (m) => {
      got.push(m)
      // The rest of what is waiting, taken now (as the owner drains its port).
      for (let n = b.take(); n !== undefined; n = b.take()) got.push(`taken ${String(n.message)}`)
    })
    a.postMessage(1)
    a.postMessage(2)
    a.postMessage(3)
    expect(got).toEqual([]) // not inside postMessage
    await tick()
    expect(got).toEqual([1, 'taken 2', 'taken 3'])
    expect(b.take()).toBeUndefined()
  })

  it('a message posted from a listener arrives on a later turn, not inside the listener', async () => {
    const [a, b] = LocalPort.pair()
    const order: string[] = []
    b.on('message', (m) => {
      order.push(`b got ${String(m)}`)
      b.postMessage(`re ${String(m)}`)
      order.push('b returns')
    })
    a.on('message', (m) => order.push(`a got ${String(m)}`))
    a.postMessage('x')
    await tick()
    await tick()
    expect(order).toEqual(['b got x', 'b returns', 'a got re x'])
  })

  it('after a close, what was posted before still arrives; later posts are dropped either way', async () => {
    const [a, b] = LocalPort.pair()
    const atA: unknown[] = []
    const atB: unknown[] = []
    a.on('message', (m) => atA.push(m))
    b.on('message', (m) => atB.push(m))
    b.postMessage('last reply')
    b.close()
    b.postMessage('after close')
    a.postMessage('to a closed peer')
    await tick()
    expect(atA).toEqual(['last reply'])
    expect(atB).toEqual([])
  })

  it('messages posted before a listener is set wait for it; a throwing listener does not lose the rest', async () => {
    const [a, b] = LocalPort.pair()
    a.postMessage('early')
    a.postMessage('boom')
    a.postMessage('after')
    await tick()
    const got: unknown[] = []
    const errors: unknown[] = []
    const onError = (err: unknown) => errors.push(err)
    process.prependListener('uncaughtException', onError)
    const vitestListeners = process.listeners('uncaughtException').filter((l) => l !== onError)
    for (const l of vitestListeners) process.removeListener('uncaughtException', l)
    try {
      b.on('message', (m) => {
        got.push(m)
        if (m === 'boom') throw new Error('listener failed')
      })
      await tick()
      await tick()
    } finally {
      process.removeListener('uncaughtException', onError)
      for (const l of vitestListeners) process.on('uncaughtException', l)
    }
    expect(got).toEqual(['early', 'boom', 'after'])
    expect(errors.map((e) => (e as Error).message)).toEqual(['listener failed'])
  })

  it('copies what an end posts through its copy function', async () => {
    const [a, b] = LocalPort.pair(undefined, (m) => ({ ...(m as object), copied: true }))
    const got: unknown[] = []
    a.on('message', (m) => got.push(m))
    const sent = { v: 1 }
    b.postMessage(sent)
    await tick()
    expect(got).toEqual([{ v: 1, copied: true }])
    expect(got[0]).not.toBe(sent)
  })
})

describe('an in-thread owner (workers: 0) through AgentLog', () => {
  it('lets timers run during a stream of serial commits', async () => {
    const log = await AgentLog.open({ root: tempDir(), workers: 0 })
    try {
      let fired = 0
      const timer = setInterval(() => fired++, 1)
      let n = 0
      const until = performance.now() + 300
      while (performance.now() < until || n < 20) {
        await log.append('w', { op: 'delete', path: `p${n++}` })
      }
      clearInterval(timer)
      expect(fired).toBeGreaterThan(0)
      expect((await log.append('w', { op: 'delete', path: 'last' })).seq).toBe(n + 1)
    } finally {
      await log.close()
    }
  })

  it("gives each caller its own copy of a reply (a workspace's open report)", async () => {
    const log = await AgentLog.open({ root: tempDir(), workers: 0 })
    try {
      const first = await log.openWorkspace('w')
      ;(first as { lastSeq: number }).lastSeq = 999
      const again = await log.openWorkspace('w')
      expect(again.lastSeq).toBe(0)
      expect(again).not.toBe(first)
    } finally {
      await log.close()
    }
  })
})
