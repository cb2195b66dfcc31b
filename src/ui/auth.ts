/**
 * The UI's token, as Jupyter's: a random secret printed once at start (or the first line of
 * `--token-file`), which every request carries: `?token=` (the URL printed), then the cookie the
 * first answer sets, or an `Authorization: Bearer` header for scripts. Compared in constant
 * time (SHA-256 of both, timingSafeEqual), as the daemon compares its TCP token.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto'
import type { IncomingMessage } from 'node:http'
import { readToken } from '../serve/daemon.js'

export interface UiToken {
  /** The secret itself when this process made it (to print); null when it came from a file. */
  readonly shown: string | null
  readonly digest: Buffer
}

export function makeToken(tokenFile?: string): UiToken {
  if (tokenFile !== undefined) return { shown: null, digest: readToken(tokenFile) }
  const token = randomBytes(24).toString('base64url')
  return { shown: token, digest: digestOf(token) }
}

function digestOf(token: string): Buffer {
  return createHash('sha256').update(token).digest()
}

export function tokenMatches(token: UiToken, given: string | null): boolean {
  return given !== null && timingSafeEqual(token.digest, digestOf(given))
}

/** Cookies are per host, not per port: the port in the name keeps two UIs on one host apart. */
export function cookieName(port: number): string {
  return `noa-ui-${port}`
}

/** The token a request carries, from the query, the header or the cookie (in that order). */
export function tokenOf(req: IncomingMessage, url: URL, port: number): string | null {
  const q = url.searchParams.get('token')
  if (q !== null) return q
  const auth = req.headers.authorization
  if (typeof auth === 'string' && auth.startsWith('Bearer ')) return auth.slice(7).trim()
  const name = cookieName(port)
  for (const part of (req.headers.cookie ?? '').split(';')) {
    const i = part.indexOf('=')
    if (i > 0 && part.slice(0, i).trim() === name) return decodeURIComponent(part.slice(i + 1).trim())
  }
  return null
}
