/**
 * Norma's token estimate and its way of printing token counts. Both count Unicode code points
 * (Go runes), not UTF-16 units.
 */

function isCjk(c: number): boolean {
  return (c >= 0x4e00 && c <= 0x9fff) || (c >= 0x3040 && c <= 0x30ff) || (c >= 0xac00 && c <= 0xd7af)
}

/** Norma's `DefaultCountTokens`: one token per CJK character, one per 4 other characters (rounded up). */
export function countTokens(text: string): number {
  if (text === '') return 0
  let cjk = 0
  let other = 0
  for (const ch of text) {
    if (isCjk(ch.codePointAt(0) as number)) cjk++
    else other++
  }
  return cjk + Math.ceil(other / 4)
}

/** Characters as Go's `utf8.RuneCountInString` counts them. */
export function runeLength(text: string): number {
  let n = 0
  for (const _ of text) n++
  return n
}

/**
 * Go's `%.1f` of n/1000 for 1000 ≤ n < 10000. JavaScript's toFixed rounds an exact tie up and Go
 * rounds it to even; the only exact ties are n/1000 = x.25 and x.75 (the other x.x5 are not
 * exactly representable, and both round the binary value the same way).
 */
function oneDecimalThousands(n: number): string {
  const r = n % 1000
  if (r === 250 || r === 750) {
    const tenths = Math.floor(n / 100) // x.2 or x.7
    const even = tenths % 2 === 0 ? tenths : tenths + 1
    return `${Math.floor(even / 10)}.${even % 10}`
  }
  return (n / 1000).toFixed(1)
}

/** Norma's `FormatTokens`: `999`, `1.2K`, `12K`. */
export function formatTokens(n: number): string {
  if (n < 1000) return String(n)
  if (n < 10000) return `${oneDecimalThousands(n)}K`
  return `${Math.round(n / 1000)}K`
}
