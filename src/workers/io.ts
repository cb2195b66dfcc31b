/**
 * The I/O layer an owner worker writes through. By default it is the addon itself; a test can
 * name a module (`AgentLog.open({ ioModule })`) whose default export wraps it, to count the
 * fdatasyncs or make one fail with EIO or ENOSPC.
 */
import { loadNative, type NativeIo } from '../engine/native.js'

export type LogIo = NativeIo

export type IoWrapper = (io: LogIo, options: unknown) => LogIo | Promise<LogIo>

export async function loadIo(ioModule: string | undefined, options: unknown): Promise<LogIo> {
  const native = loadNative()
  if (ioModule === undefined) return native
  const mod = (await import(ioModule)) as { default?: IoWrapper }
  if (typeof mod.default !== 'function') {
    throw new TypeError(`ioModule ${ioModule} must export a default function (io, options) => io`)
  }
  return mod.default(native, options)
}
