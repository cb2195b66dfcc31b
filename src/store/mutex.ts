/**
 * Per-workspace mutual exclusion inside one process. Snapshot, fork and merge read a
 * workspace's head and then append after it; two of them on the same workspace at once would
 * both build on the same head. (Across processes the owner's flock already keeps a workspace to
 * one writer.) Keys are taken in sorted order, so operations on several workspaces never
 * deadlock.
 */
export class KeyedMutex {
  private readonly tails = new Map<string, Promise<void>>()

  async run<T>(keys: readonly string[], fn: () => Promise<T>): Promise<T> {
    const release = await this.lock(keys)
    try {
      return await fn()
    } finally {
      release()
    }
  }

  private async lock(keys: readonly string[]): Promise<() => void> {
    const releases: Array<() => void> = []
    for (const key of [...new Set(keys)].sort()) {
      const previous = this.tails.get(key) ?? Promise.resolve()
      let release!: () => void
      const held = new Promise<void>((resolve) => {
        release = resolve
      })
      const tail = previous.then(() => held)
      this.tails.set(key, tail)
      await previous
      releases.push(() => {
        release()
        if (this.tails.get(key) === tail) this.tails.delete(key)
      })
    }
    return () => {
      for (const r of releases) r()
    }
  }
}

const byOwner = new WeakMap<object, KeyedMutex>()

/** The mutex shared by every engine writing through the same AgentLog. */
export function mutexFor(owner: object): KeyedMutex {
  let m = byOwner.get(owner)
  if (!m) {
    m = new KeyedMutex()
    byOwner.set(owner, m)
  }
  return m
}
