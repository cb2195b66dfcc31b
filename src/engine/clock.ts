/** Unix time in microseconds, from the high-resolution clock anchored at this thread's start. */
export function nowMicros(): number {
  return Math.floor((performance.timeOrigin + performance.now()) * 1000)
}

/** The next ts for a workspace: now, or last + 1 when the clock stalls or steps back. */
export function nextTs(last: number, now = nowMicros()): number {
  return now > last ? now : last + 1
}
