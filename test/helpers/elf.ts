/**
 * The symbol versions a shared object needs (GLIBC_2.28, GLIBCXX_3.4.22, …), read from its ELF
 * version-needs section (.gnu.version_r) without any tool: what the dynamic loader checks
 * before it loads the file.
 */
import { readFileSync } from 'node:fs'

const SHT_GNU_VERNEED = 0x6ffffffe

function cString(buf: Buffer, at: number): string {
  const end = buf.indexOf(0, at)
  return buf.toString('latin1', at, end < 0 ? buf.length : end)
}

export function versionNeeds(file: string): string[] {
  const b = readFileSync(file)
  if (b.readUInt32BE(0) !== 0x7f454c46) throw new Error(`${file} is not an ELF file`)
  if (b[4] !== 2 || b[5] !== 1) throw new Error(`${file} is not a little-endian 64-bit ELF file`)
  const shoff = Number(b.readBigUInt64LE(0x28))
  const shentsize = b.readUInt16LE(0x3a)
  const shnum = b.readUInt16LE(0x3c)
  const section = (i: number) => {
    const at = shoff + i * shentsize
    return {
      type: b.readUInt32LE(at + 4),
      offset: Number(b.readBigUInt64LE(at + 24)),
      link: b.readUInt32LE(at + 40),
      info: b.readUInt32LE(at + 44),
    }
  }
  const names: string[] = []
  for (let i = 0; i < shnum; i++) {
    const s = section(i)
    if (s.type !== SHT_GNU_VERNEED) continue
    const strtab = section(s.link).offset
    let need = s.offset
    for (let n = 0; n < s.info; n++) {
      const cnt = b.readUInt16LE(need + 2)
      let aux = need + b.readUInt32LE(need + 8)
      for (let k = 0; k < cnt; k++) {
        names.push(cString(b, strtab + b.readUInt32LE(aux + 8)))
        aux += b.readUInt32LE(aux + 12)
      }
      need += b.readUInt32LE(need + 12)
    }
  }
  return names.sort()
}

/** The highest version needed in each namespace: { GLIBC: '2.28', GLIBCXX: '3.4.22', … }. */
export function highestNeeds(file: string): Record<string, string> {
  const out: Record<string, string> = {}
  for (const name of versionNeeds(file)) {
    const m = /^([A-Z]+)_([0-9.]+)$/.exec(name)
    if (!m) continue
    const [, ns, version] = m as unknown as [string, string, string]
    const prev = out[ns]
    if (prev === undefined || compareVersions(version, prev) > 0) out[ns] = version
  }
  return out
}

export function compareVersions(a: string, b: string): number {
  const x = a.split('.').map(Number)
  const y = b.split('.').map(Number)
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    const d = (x[i] ?? 0) - (y[i] ?? 0)
    if (d !== 0) return d
  }
  return 0
}
