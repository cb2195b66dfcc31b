/**
 * What a writer finds at the end of a transcript before its first append. Norma appends blindly,
 * so after a crash its next line glues onto the torn one and the file can never load again; noa
 * looks first and never glues:
 * - `clean`: missing, empty, or ending in `\n`: append as is;
 * - `torn`: bytes after the last `\n` that are not JSON (what a crash mid-append leaves): cut them,
 *   the same rule the loader drops them by;
 * - `unterminated`: a complete JSON line without its `\n` (another tool wrote it): keep it and
 *   write the missing `\n` first.
 */
import { openFile, READ } from '../engine/files.js'

export type TailState = 'clean' | 'torn' | 'unterminated'

export interface TailInfo {
  state: TailState
  size: number
  /** Length up to and including the last `\n`. */
  validLength: number
}

const STEP = 64 * 1024

export async function inspectTranscriptTail(file: string): Promise<TailInfo> {
  let handle: Awaited<ReturnType<typeof openFile>>
  try {
    // Never through a symlink, never a FIFO: what is cut or appended to must be this file.
    handle = await openFile(file, READ, { what: 'transcript' })
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { state: 'clean', size: 0, validLength: 0 }
    throw err
  }
  try {
    const size = (await handle.stat()).size
    // Search backwards for the last newline.
    let validLength = 0
    const buf = Buffer.allocUnsafe(STEP)
    let end = size
    search: while (end > 0) {
      const start = Math.max(0, end - STEP)
      const { bytesRead } = await handle.read(buf, 0, end - start, start)
      for (let i = bytesRead - 1; i >= 0; i--) {
        if (buf[i] === 0x0a) {
          validLength = start + i + 1
          break search
        }
      }
      end = start
    }
    if (validLength === size) return { state: 'clean', size, validLength }
    const tail = Buffer.allocUnsafe(size - validLength)
    let got = 0
    while (got < tail.length) {
      const { bytesRead } = await handle.read(tail, got, tail.length - got, validLength + got)
      if (bytesRead === 0) break
      got += bytesRead
    }
    let text = tail.toString('utf8', 0, got)
    if (text.endsWith('\r')) text = text.slice(0, -1)
    try {
      if (text !== '') {
        JSON.parse(text)
        return { state: 'unterminated', size, validLength }
      }
    } catch {
      // not JSON: torn
    }
    return { state: 'torn', size, validLength }
  } finally {
    await handle.close()
  }
}
